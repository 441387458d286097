// Output sinks: a graph output (the loss, logits) over the micro-batches of a step, and the
// collection that output sinks and gradient stages share (sink.hpp).
#include <limits>

#include "actor_kinds.hpp"
#include "sink.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/layout.hpp"

namespace troupe::actors {

Values Sink::act(Node& node, int mb) {
  if (mb == 0) parts_.clear();
  parts_.push_back(node.input(node.spec().inputs[0]));
  const StepContext& ctx = node.ctx();
  if (mb + 1 < ctx.micro_batches) return nullptr;
  Tensor value;
  try {
    if (parts_.size() == 1) {
      value = parts_[0];
    } else if (node.spec().average) {
      // Each micro-batch counts by its share of the rows, so a mean over the rows (the loss, its
      // gradients) comes out as the whole batch's mean even when the micro-batches differ in size.
      value = kernels::mul(parts_[0], ctx.weights[0]);
      for (std::size_t k = 1; k < parts_.size(); ++k) value = kernels::add(value, kernels::mul(parts_[k], ctx.weights[k]));
    } else {
      value = kernels::concat(parts_, 0);
    }
  } catch (const Error& e) {
    throw Error(e.kind(), "'" + node.spec().name + "' could not combine micro-batches: " + e.message());
  }
  parts_.clear();
  finish(node, value);
  return nullptr;
}

namespace {

class OutputSink : public Sink {
 protected:
  void finish(Node& node, const Tensor& value) override {
    node.tell_program("result", value.nbytes(), result_atom::value, node.step(), node.spec().sink, value,
                      std::numeric_limits<double>::quiet_NaN());
  }
};

}  // namespace

std::shared_ptr<NodeKind> output_sink_kind() { return std::make_shared<OutputSink>(); }

}  // namespace troupe::actors
