// The select front ends: checks, the output, dispatch.
#include "troupe/kernels/select.hpp"

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

Tensor causal_mask(const Tensor& x, double fill) {
  check_float("causal_mask", "input", x, true);
  TROUPE_CHECK(x.dim() >= 2 && x.shape()[x.dim() - 1] == x.shape()[x.dim() - 2], shape_mismatch,
               "causal_mask: the last two dims must be square (queries x keys), got ", shape_str(x.shape()));
  std::vector<Tensor> out{Tensor::empty(x.shape(), x.dtype(), x.device())};
  dispatch("causal_mask", {x.contiguous()}, out, Attrs().set("fill", fill));
  return out[0];
}

Tensor max_backward(const Tensor& grad, const Tensor& x, const Tensor& y) {
  check_float("max_backward", "x", x);
  check_float_like("max_backward", "grad", grad, "x", x);
  check_float_like("max_backward", "max", y, "x", x);
  TROUPE_CHECK(y.dim() == x.dim() && grad.shape() == y.shape(), shape_mismatch,
               "max_backward: grad ", shape_str(grad.shape()), " and max ", shape_str(y.shape()),
               " must have x's rank with reduced dims kept as 1; x is ", shape_str(x.shape()));
  broadcast_shapes(y.shape(), x.shape(), "max_backward");
  std::vector<Tensor> out{Tensor::empty(x.shape(), x.dtype(), x.device())};
  dispatch("max_backward", {grad, x, y}, out);
  return out[0];
}

}  // namespace troupe::kernels
