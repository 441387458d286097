// Output sinks: a graph output (the loss, logits) over the micro-batches of a step, and the
// collection that output sinks and gradient stages share (sink.hpp).
#include <utility>

#include "actor_kinds.hpp"
#include "sink.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::actors {

namespace {

// The micro-batches' values weighted by their share of the rows, so a mean over the rows (the
// loss, its gradients) comes out as the whole batch's mean even when the micro-batches differ in
// size. With `into` defined the last add writes straight there, so no copy follows.
Tensor weighted_sum(const std::vector<Tensor>& parts, const std::vector<double>& weights, const Tensor& into) {
  Tensor value = kernels::mul(parts[0], weights[0]);
  for (std::size_t k = 1; k + 1 < parts.size(); ++k) value = kernels::add(value, kernels::mul(parts[k], weights[k]));
  const Tensor last = kernels::mul(parts.back(), weights.back());
  if (!into.defined()) return kernels::add(value, last);
  kernels::binary_into(kernels::BinaryOp::add, value, last, into);
  return into;
}

}  // namespace

Values Sink::act(Node& node, int mb) {
  if (mb == 0) parts_.clear();
  parts_.push_back(node.input(node.spec().inputs[0]));
  const StepContext& ctx = node.ctx();
  if (mb + 1 < ctx.micro_batches) return nullptr;
  Tensor value;
  try {
    Tensor into = destination(node);
    TROUPE_CHECK(!into.defined() || into.shape() == parts_[0].shape(), shape_mismatch, "its value has shape ",
                 shape_str(parts_[0].shape()), " but its place in the gradient bucket has shape ", shape_str(into.shape()));
    if (parts_.size() > 1 && node.spec().average) {
      value = weighted_sum(parts_, ctx.weights, into);
    } else if (parts_.size() > 1) {
      value = kernels::concat(parts_, 0);
    } else if (into.defined()) {
      into.copy_from(parts_[0]);  // one micro-batch: its gradient was made elsewhere, so it is copied in once
      value = into;
    } else {
      value = parts_[0];
    }
  } catch (const Error& e) {
    throw Error(e.kind(), "'" + node.spec().name + "' could not combine micro-batches: " + e.message());
  }
  parts_.clear();
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
