// A pipeline stage's step (troupe/graph/pipeline_stage.hpp): the forward with its receives, and
// its backward with the sends to both neighbours.
#include "troupe/graph/pipeline_stage.hpp"

#include "troupe/graph/autodiff.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {

void check_channels(const StageChannels& c) {
  TROUPE_CHECK((c.activation_in < 0) == (c.gradient_out < 0) && (c.activation_out < 0) == (c.gradient_in < 0),
               invalid_argument, "pipeline stage: a neighbour's channels come in pairs (activation_in with gradient_out, "
               "activation_out with gradient_in)");
}

}  // namespace

TraceableFn stage_forward(TraceableFn stage, StageChannels channels) {
  check_channels(channels);
  return [stage = std::move(stage), channels](const std::vector<Var>& inputs) {
    std::vector<Var> args = inputs;
    Var received;
    if (!channels.first()) {
      TROUPE_CHECK(!inputs.empty(), invalid_argument, "pipeline stage: a stage after the first takes the previous "
                   "stage's output as input 0, and it got no inputs");
      args[0] = received = pipe_recv(inputs[0], channels.activation_in);
    }
    const std::vector<Var> out = stage(args);
    TROUPE_CHECK(!out.empty(), invalid_argument, "pipeline stage: the stage's function returned nothing; it returns "
                 "its output (the loss on the last stage)");
    std::vector<Var> result{out[0]};
    if (received.defined()) result.push_back(received);
    return result;
  };
}

TracedFunction TracedFunction::with_stage_gradients(const StageChannels& channels, const Var& loss_scale) const {
  check_channels(channels);
  const std::size_t expected = channels.first() ? 1 : 2;
  TROUPE_CHECK(outputs_ == expected, invalid_argument, "with_stage_gradients: the function has ", outputs_,
               " outputs and these channels ask for ", expected, "; trace stage_forward() with the same channels");
  TROUPE_CHECK(channels.last() || !loss_scale.defined(), invalid_argument,
               "with_stage_gradients: only the last stage's backward starts from the loss scale");
  TracedFunction f = *this;
  auto g = std::make_shared<Graph>(*graph_);
  const std::vector<ValueId> traced = g->outputs();
  const ValueId output = traced[0];
  const ValueInfo out = g->value(output).info;
  TROUPE_CHECK(channels.last() || is_floating(out.dtype), dtype_mismatch, "pipeline stage: its output is ",
               dtype_name(out.dtype), "; a stage before the last passes on a floating value, whose gradient comes back");
  // The gradient of the output arrives in the output's dtype as mixed precision left it (made
  // here, after autocast, so the two agree); the last stage starts from the loss scale, or 1.
  const ValueId seed =
      channels.last()
          ? f.add_loss_scale(*g, loss_scale)
          : g->node(g->add_node("pipe_recv", {output},
                                Attrs()
                                    .set("group", static_cast<std::int64_t>(channels.gradient_in))
                                    .set("dtype", static_cast<std::int64_t>(out.dtype))))
                .outputs[0];
  std::vector<ValueId> extra;
  if (!channels.first()) extra.push_back(traced.back());
  auto send = [&](ValueId v, int group) {
    return g->node(g->add_node("pipe_send", {v}, Attrs().set("group", static_cast<std::int64_t>(group)))).outputs[0];
  };
  std::vector<ValueId> outputs{channels.last() ? output : send(output, channels.activation_out)};
  std::vector<ValueId> gradients;  // the parameters', which follow the step's own outputs
  const std::vector<ValueId> received = f.append_gradients(*g, {}, output, seed, extra, gradients);
  if (!channels.first()) {
    const NodeId first_added = static_cast<NodeId>(g->nodes().size());
    ValueId dx = received[0];
    // A stage whose output does not depend on its input still answers, or the previous stage waits forever.
    if (dx < 0) dx = zeros_like(Var::symbolic(g.get(), traced.back())).id();
    outputs.push_back(send(dx, channels.gradient_out));
    for (NodeId n = first_added; n < static_cast<NodeId>(g->nodes().size()); ++n) g->mutable_node(n).backward = true;
  }
  f.outputs_ = outputs.size();
  f.backward_received_ = !channels.last();
  outputs.insert(outputs.end(), gradients.begin(), gradients.end());
  g->set_outputs(std::move(outputs));
  f.graph_ = std::move(g);
  f.memory_ = nullptr;
  return f;
}

}  // namespace troupe::graph
