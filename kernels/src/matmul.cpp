// The matmul front end: dtype and shape checks, the broadcast batch of the output, dispatch.
#include "troupe/kernels/matmul.hpp"

#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TROUPE_CHECK(a.defined() && b.defined(), invalid_argument, "matmul: undefined input");
  TROUPE_CHECK(a.dim() >= 2 && b.dim() >= 2, shape_mismatch, "matmul: inputs need rank >= 2, got ", shape_str(a.shape()),
               " and ", shape_str(b.shape()));
  TROUPE_CHECK(a.dtype() == b.dtype(), dtype_mismatch, "matmul: dtypes differ: ", a.str(), " and ", b.str());
  TROUPE_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64 || a.dtype() == DType::bf16, dtype_mismatch,
               "matmul: ", a.str(), " has dtype ", dtype_name(a.dtype()), "; matmul takes f32, f64 or bf16");
  const std::int64_t m = a.size(trans_a ? -1 : -2), ka = a.size(trans_a ? -2 : -1);
  const std::int64_t kb = b.size(trans_b ? -1 : -2), n = b.size(trans_b ? -2 : -1);
  TROUPE_CHECK(ka == kb, shape_mismatch, "matmul: inner dimensions differ: a ", shape_str(a.shape()),
               trans_a ? " (transposed)" : "", " gives K=", ka, ", b ", shape_str(b.shape()),
               trans_b ? " (transposed)" : "", " gives K=", kb);
  const Shape &as = a.shape(), &bs = b.shape();
  Shape out_shape = broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2),
                                     "matmul (batch dims)");
  out_shape.push_back(m);
  out_shape.push_back(n);
  std::vector<Tensor> out{Tensor::empty(out_shape, a.dtype(), a.device())};
  dispatch("matmul", {a, b}, out,
           Attrs().set("trans_a", std::int64_t{trans_a}).set("trans_b", std::int64_t{trans_b}));
  return out[0];
}

}  // namespace troupe::kernels
