// Output sinks: a graph output (the loss, logits) over the micro-batches of a step, and the
// collection that output sinks and gradient stages share (sink.hpp).
#include <utility>

#include "actor_kinds.hpp"
#include "sink.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::actors {

Values Sink::act(Node& node, int mb) {
  if (mb == 0) {  // (a failed step may have left some behind)
    parts_.clear();
    sum_ = Tensor();
  }
  const StepContext& ctx = node.ctx();
  const bool last = mb + 1 == ctx.micro_batches;
  Tensor value;
  try {
    const Tensor& part = node.input(node.spec().inputs[0]);
    Tensor into = last ? destination(node) : Tensor();
    TROUPE_CHECK(!into.defined() || into.shape() == part.shape(), shape_mismatch, "its value has shape ",
                 shape_str(part.shape()), " but its place in the gradient bucket has shape ", shape_str(into.shape()));
    if (ctx.micro_batches > 1 && node.spec().average) {
      // The micro-batches' values weighted by their share of the rows, so a mean over the rows
      // (the loss, its gradients) comes out as the whole batch's mean even when they differ in
      // size; summed as they come, so a step holds one sum, not a value per micro-batch (a
      // pipeline stage's gradients over many micro-batches). The last add writes straight into
      // `into` when there is one, so no copy follows.
      const Tensor weighted = kernels::mul(part, ctx.weights[static_cast<std::size_t>(mb)]);
      if (mb == 0) {
        sum_ = weighted;
      } else if (!last) {
        kernels::binary_into(kernels::BinaryOp::add, sum_, weighted, sum_);
      } else if (into.defined()) {
        kernels::binary_into(kernels::BinaryOp::add, sum_, weighted, into);
        value = into;
      } else {
        value = kernels::add(sum_, weighted);
      }
    } else if (ctx.micro_batches > 1) {
      parts_.push_back(part);
      if (last) value = kernels::concat(parts_, 0);
    } else if (into.defined()) {
      into.copy_from(part);  // one micro-batch: its gradient was made elsewhere, so it is copied in once
      value = into;
    } else {
      value = part;
    }
  } catch (const Error& e) {
    throw Error(e.kind(), "'" + node.spec().name + "' could not combine micro-batches: " + e.message());
  }
  if (!last) return nullptr;
  parts_.clear();
  sum_ = Tensor();
  prepare(node, value);
  combined_ = std::move(value);
  return nullptr;
}

// After the act: what it read is then free before anything downstream of the send runs, the next
// step included (step_memory.hpp).
void Sink::after_act(Node& node) {
  if (combined_.defined()) finish(node, std::exchange(combined_, Tensor()));
}

namespace {

class OutputSink : public Sink {
 protected:
  void finish(Node& node, const Tensor& value) override {
    node.tell_to(node.peers().program, "output", value.nbytes(), output_atom::value, node.step(), node.spec().sink, value);
  }
};

}  // namespace

std::shared_ptr<NodeKind> output_sink_kind() { return std::make_shared<OutputSink>(); }

}  // namespace troupe::actors
