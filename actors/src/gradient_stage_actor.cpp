// Gradient stages: a parameter's gradient over the micro-batches of a step. On the parallel clip
// path it also takes the gradient's share of the global norm here, while other stages of backward
// still run, instead of in one pass after the step.
#include <limits>

#include "actor_kinds.hpp"
#include "sink.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

class GradientStage : public Sink {
 protected:
  void finish(Node& node, const Tensor& gradient) override {
    double squared_norm = std::numeric_limits<double>::quiet_NaN();
    if (node.ctx().gradient_norms) {
      try {
        squared_norm = kernels::squared_norm(gradient);
      } catch (const Error& e) {
        throw Error(e.kind(), "'" + node.spec().name + "' could not take its gradient norm: " + e.message());
      }
    }
    node.tell_program("result", gradient.nbytes(), result_atom::value, node.step(), node.spec().sink, gradient,
                      squared_norm);
  }
};

}  // namespace

std::shared_ptr<NodeKind> gradient_stage_kind() { return std::make_shared<GradientStage>(); }

}  // namespace troupe::actors
