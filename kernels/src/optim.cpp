// The front ends of the gradient path: checks (in-place operands dense and alike), dispatch, and the
// host arithmetic of the clipping factor.
#include "troupe/kernels/optim.hpp"

#include <cmath>
#include <mutex>
#include <vector>

#include "float_checks.hpp"
#include "troupe/kernels/planned_memory.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

namespace {

// The kernels update in place, so every operand must be dense and in the parameter's dtype.
void check_dense(const char* op, const char* role, const Tensor& t, const Tensor& param) {
  check_float_like(op, role, t, "parameter", param);
  TROUPE_CHECK(t.is_contiguous(), invalid_argument, op, ": ", role, " ", t.str(),
               " must be dense; call contiguous() first");
  TROUPE_CHECK(t.shape() == param.shape(), shape_mismatch, op, ": ", role, " ", shape_str(t.shape()),
               " must match the parameter ", shape_str(param.shape()));
}

// The (hi, lo) pairs host squared norms are written to: slices of one block per dtype, made at the
// first call outside any step's plan and handed out under a lock, so no later norm asks the
// allocator, whichever thread takes it (a pair per thread, made on a thread's first norm, showed up
// as an allocation in whichever step first ran a norm on a new thread).
class NormPairs {
 public:
  /// A free pair of `dtype` (f32 or f64), or a new one when all are in use.
  Tensor acquire(DType dtype) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& p = pools_[dtype == DType::f64 ? 1 : 0];
    if (!p.block.defined()) {
      UnplannedMemory outside_plans;
      p.block = Tensor::empty({kPairs, 2}, dtype);
      for (std::int64_t i = kPairs; i-- > 0;) p.free.push_back(p.block.slice(0, i, i + 1).view({2}));
    }
    if (p.free.empty()) {
      UnplannedMemory outside_plans;
      return Tensor::empty({2}, dtype);
    }
    Tensor pair = std::move(p.free.back());
    p.free.pop_back();
    return pair;
  }
  /// Gives a pair back (one acquire made beyond the block is simply dropped).
  void release(Tensor pair) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& p = pools_[pair.dtype() == DType::f64 ? 1 : 0];
    if (pair.storage() == p.block.storage()) p.free.push_back(std::move(pair));
  }

 private:
  static constexpr std::int64_t kPairs = 64;  // more norms at once than threads on any machine here
  struct Pool {
    Tensor block;
    std::vector<Tensor> free;
  };
  std::mutex mutex_;
  Pool pools_[2];
};

NormPairs& norm_pairs() {
  static NormPairs pairs;
  return pairs;
}

}  // namespace

double squared_norm(const Tensor& x) {
  check_float("squared_norm", "input", x);
  if (!x.device().is_cpu()) {
    std::vector<Tensor> out{Tensor::empty({2}, x.dtype(), x.device())};
    dispatch("squared_norm", {x.contiguous()}, out);
    const auto hl = out[0].to(Device::cpu()).to(DType::f64).to_vector<double>();
    return hl[0] + hl[1];
  }
  // The result's two values (hi and lo) go to a pooled pair (NormPairs), so a norm taken every step
  // (a gradient bucket's) asks the allocator nothing.
  std::vector<Tensor> out{norm_pairs().acquire(x.dtype())};
  struct Release {
    Tensor& pair;
    ~Release() { norm_pairs().release(std::move(pair)); }
  } release{out[0]};
  dispatch("squared_norm", {x.contiguous()}, out);
  const Tensor& pair = out[0];
  if (x.dtype() == DType::f64) return pair.data<double>()[0] + pair.data<double>()[1];
  return static_cast<double>(pair.data<float>()[0]) + static_cast<double>(pair.data<float>()[1]);
}

void scale_(const Tensor& x, double s) {
  check_dense("scale_", "tensor", x, x);
  std::vector<Tensor> none;
  dispatch("scale_", {x}, none, Attrs().set("scale", s));
}

double clip_coefficient(double total_norm, double max_norm) {
  TROUPE_CHECK(max_norm > 0, invalid_argument, "clip_coefficient: max_norm must be positive, got ", max_norm);
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 || !std::isfinite(c) ? c : 1.0;
}

void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdParams& p,
                 bool first_step, double grad_scale) {
  check_dense("sgd_update_", "param", param, param);
  check_dense("sgd_update_", "grad", grad, param);
  if (p.momentum != 0) check_dense("sgd_update_", "momentum buffer", momentum_buf, param);
  TROUPE_CHECK(p.lr >= 0 && p.momentum >= 0, invalid_argument, "sgd_update_: lr and momentum must be >= 0");
  TROUPE_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0), invalid_argument,
               "sgd_update_: nesterov needs momentum > 0 and dampening 0");
  std::vector<Tensor> none;
  dispatch("sgd_update_", {param, grad, p.momentum != 0 ? momentum_buf : Tensor()}, none,
           Attrs()
               .set("lr", p.lr)
               .set("momentum", p.momentum)
               .set("weight_decay", p.weight_decay)
               .set("dampening", p.dampening)
               .set("nesterov", std::int64_t{p.nesterov})
               .set("first_step", std::int64_t{first_step})
               .set("grad_scale", grad_scale));
}

void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                   std::int64_t step, double grad_scale) {
  check_dense("adamw_update_", "param", param, param);
  check_dense("adamw_update_", "grad", grad, param);
  check_dense("adamw_update_", "first moment", m, param);
  check_dense("adamw_update_", "second moment", v, param);
  TROUPE_CHECK(step >= 1, invalid_argument, "adamw_update_: step counts from 1, got ", step);
  TROUPE_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1, invalid_argument,
               "adamw_update_: betas must be in [0, 1), got ", p.beta1, ", ", p.beta2);
  std::vector<Tensor> none;
  dispatch("adamw_update_", {param, grad, m, v}, none,
           Attrs()
               .set("lr", p.lr)
               .set("beta1", p.beta1)
               .set("beta2", p.beta2)
               .set("eps", p.eps)
               .set("weight_decay", p.weight_decay)
               .set("step", step)
               .set("grad_scale", grad_scale));
}

}  // namespace troupe::kernels
