// Gradient stages: a parameter's gradient over the micro-batches of a step, passed on along the
// gradient path without a stop at the program. With data parallelism the gradient is written
// straight into its slice of its bucket's flat buffer and the bucket is told; otherwise the
// gradient (a handle) goes to the optimizer actors that own it, and its share of the clipping norm
// to the clip actor. On the parallel clip path that share is taken here, while other stages of
// backward still run, instead of in one pass after the step.
#include "actor_kinds.hpp"
#include "sink.hpp"
#include "trace_hooks.hpp"
#include "troupe/kernels/optim.hpp"

namespace troupe::actors {

namespace {

class GradientStage : public Sink {
 protected:
  Tensor destination(Node& node) override {
    const GradientPath& path = node.peers().gradients;
    if (!path.buckets) return Tensor();
    const auto sink = static_cast<std::size_t>(node.spec().sink);
    const auto b = static_cast<std::size_t>(path.buckets->bucket_of_sink[sink]);
    for (const BucketEntry& e : path.buckets->buckets[b])
      if (e.sink == node.spec().sink)
        return node.ctx().buckets[b].slice(0, e.offset, e.offset + shape_numel(e.shape)).reshape(e.shape);
    fail(ErrorKind::runtime, "'", node.spec().name, "' has no place in gradient bucket ", b);
  }

  void prepare(Node& node, const Tensor& gradient) override {
    const GradientPath& path = node.peers().gradients;
    if (!path.buckets && path.clip.actor && path.clip_takes_norms)
      squared_norm_ = path.norm_weight[static_cast<std::size_t>(node.spec().sink)] * squared_norm(node, gradient);
  }

  void finish(Node& node, const Tensor& gradient) override {
    const GradientPath& path = node.peers().gradients;
    const int sink = node.spec().sink;
    if (path.buckets) {
      const int b = path.buckets->bucket_of_sink[static_cast<std::size_t>(sink)];
      node.tell_to(path.bucket_actors[static_cast<std::size_t>(b)], "filled", 0, filled_atom::value, node.ctx_ptr(), sink);
      return;
    }
    const int slot = path.clip_slot[static_cast<std::size_t>(sink)];
    if (path.clip.actor && path.clip_takes_norms)
      node.tell_to(path.clip, "norm", 0, norm_atom::value, node.step(), slot, squared_norm_);
    else if (path.clip.actor)
      node.tell_to(path.clip, "gradient", 0, gradient_atom::value, node.step(), slot, gradient);
    for (int o : path.owners[static_cast<std::size_t>(sink)])
      node.tell_to(path.optimizers[static_cast<std::size_t>(o)], "gradient", gradient.nbytes(), gradient_atom::value,
                   node.step(), sink, gradient);
  }

 private:
  double squared_norm_ = 0;  // of the step's gradient, taken in the act when the clip sums norms
  static double squared_norm(Node& node, const Tensor& gradient) {
    HandlerTrace trace(node.track(), "compute", 0, node.step(), -1);  // a kernel's time, as an op's
    try {
      return kernels::squared_norm(gradient);
    } catch (const Error& e) {
      throw Error(e.kind(), "'" + node.spec().name + "' could not take its gradient norm: " + e.message());
    }
  }
};

}  // namespace

std::shared_ptr<NodeKind> gradient_stage_kind() { return std::make_shared<GradientStage>(); }

}  // namespace troupe::actors
