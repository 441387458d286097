#pragma once
// Kernels of the gradient path: chunked squared L2 norm (for global-norm clipping), in-place scaling,
// and the SGD-with-momentum and AdamW parameter updates (PyTorch semantics).

#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Elements per chunk of squared_norm: each chunk is summed in float lanes, chunk sums in double.
constexpr std::int64_t kNormChunk = 4096;

/// Sum of squares of an f32 tensor, computed chunk by chunk (bounded error, deterministic order).
double squared_norm(const Tensor& x);
/// x *= s in place (x dense f32).
void scale_(const Tensor& x, double s);
/// The factor global-norm clipping scales every gradient by: min(1, max_norm / (total_norm + 1e-6)),
/// as torch.nn.utils.clip_grad_norm_ (a non-finite norm gives a non-finite factor, as there).
double clip_coefficient(double total_norm, double max_norm);

/// Hyper-parameters of SGD (torch.optim.SGD).
struct SgdParams {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0, dampening = 0.0;
  bool nesterov = false;
};
/// One SGD step on `param` with `grad`; `momentum_buf` holds the velocity (ignored when momentum is 0).
/// On the first step the buffer is set to the gradient, as PyTorch does. `grad_scale` multiplies
/// each gradient element as it is read (a clip's coefficient): scale_(grad) then the step, bit for
/// bit, without the pass over the gradient.
void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdParams& p,
                 bool first_step, double grad_scale = 1.0);

/// Hyper-parameters of AdamW (torch.optim.AdamW, decoupled weight decay).
struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
/// One AdamW step; m and v are the moment buffers; step counts from 1. `grad_scale` as sgd_update_'s.
void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                   std::int64_t step, double grad_scale = 1.0);

}  // namespace troupe::kernels
