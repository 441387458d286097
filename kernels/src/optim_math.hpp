#pragma once
// The optimizer updates of one element, written once for the CPU and the CUDA kernels, in the
// parameters' own precision T as PyTorch computes them.

#include <cmath>

#include "elementwise_math.hpp"  // TROUPE_HOST_DEVICE

namespace troupe::kernels::math {

/// sqrt(x) in T: the host's std::sqrt, or the device's.
template <class T>
TROUPE_HOST_DEVICE inline T square_root(T x) {
#ifdef __CUDA_ARCH__
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

/// SGD with momentum (buffer `buf`, null without), dampening, Nesterov and weight decay on
/// parameter p with gradient g, scaled first by grad_scale as scale_ would have left it.
template <class T>
TROUPE_HOST_DEVICE inline void sgd_element(T& p, T g, T* buf, double lr, double mom, double wd, double damp,
                                           bool nesterov, bool first, T grad_scale) {
  const T gi = g * grad_scale;  // what scale_ would have left in the gradient
  double d = gi + wd * p;
  if (mom != 0) {
    const double b = first ? d : mom * *buf + (1 - damp) * d;
    *buf = static_cast<T>(b);
    d = nesterov ? d + mom * b : b;
  }
  p = static_cast<T>(p - lr * d);
}

/// The coefficients of one AdamW step, formed in double and rounded once to T, as PyTorch's Python
/// scalars are: 1 - b2 taken in f32 (1 - 0.999f) would be 1.3e-5 smaller than PyTorch's 0.001f.
template <class T>
struct AdamWStep {
  T b1, b2, c1, c2, eps, step_size, decay, inv_bc2, grad_scale;
  AdamWStep(double lr, double beta1, double beta2, double epsilon, double weight_decay, double step, double scale)
      : b1(T(beta1)),
        b2(T(beta2)),
        c1(T(1 - beta1)),
        c2(T(1 - beta2)),
        eps(T(epsilon)),
        step_size(T(lr / (1 - std::pow(beta1, step)))),
        decay(T(1 - lr * weight_decay)),
        inv_bc2(T(1 / (1 - std::pow(beta2, step)))),
        grad_scale(T(scale)) {}
  /// Updates parameter p and its moments m and v with gradient g.
  TROUPE_HOST_DEVICE void operator()(T& p, T& m, T& v, T g) const {
    const T gi = g * grad_scale;  // what scale_ would have left in the gradient
    const T mi = b1 * m + c1 * gi;
    const T vi = b2 * v + c2 * gi * gi;
    m = mi;
    v = vi;
    p = p * decay - step_size * mi / (square_root(vi * inv_bc2) + eps);
  }
};

}  // namespace troupe::kernels::math
