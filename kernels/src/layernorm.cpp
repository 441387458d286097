// The layer-norm front ends: dtype and shape checks, the output and statistics tensors, dispatch.
#include "troupe/kernels/layernorm.hpp"

#include <algorithm>
#include <utility>

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// The shape of the per-row statistics (mean, rstd): x's shape without the normalised last dim.
Shape row_shape(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// The checks both forward front ends make of x, gamma, beta and eps, naming `op`.
void check_layernorm_args(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_float(op, "x", x, true);
  check_float_like(op, "gamma", gamma, "x", x, true);
  check_float_like(op, "beta", beta, "x", x, true);
  TROUPE_CHECK(x.dim() > 0, invalid_argument, op, ": x needs at least one dimension, got ", x.str());
  const std::int64_t d = x.shape().back();
  TROUPE_CHECK(d > 0, invalid_argument, op, ": the last dim of x is empty: ", x.str());
  TROUPE_CHECK(gamma.shape() == Shape{d}, shape_mismatch, op, ": gamma has shape ", shape_str(gamma.shape()),
               ", expected [", d, "] for x ", shape_str(x.shape()));
  TROUPE_CHECK(beta.shape() == Shape{d}, shape_mismatch, op, ": beta has shape ", shape_str(beta.shape()),
               ", expected [", d, "] for x ", shape_str(x.shape()));
  TROUPE_CHECK(eps >= 0.0, invalid_argument, op, ": eps must be >= 0, got ", eps);
}

// The dtype y is written in: x's, or a low-precision one asked for an f32 x.
DType y_dtype_of(const char* op, const Tensor& x, std::optional<DType> y_dtype) {
  if (!y_dtype || *y_dtype == x.dtype()) return x.dtype();
  TROUPE_CHECK(x.dtype() == DType::f32 && is_low_precision(*y_dtype), dtype_mismatch, op, ": y can be written as ",
               dtype_name(*y_dtype), " only from f32 rows, got x ", x.str(), "; cast y afterwards instead");
  return *y_dtype;
}

}  // namespace

LayerNormOutput layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                          std::optional<DType> y_dtype) {
  check_layernorm_args("layernorm", x, gamma, beta, eps);
  LayerNormOutput r;
  r.y = Tensor::empty(x.shape(), y_dtype_of("layernorm", x, y_dtype), x.device());
  r.mean = Tensor::empty(row_shape(x.shape()), accumulation_dtype(x.dtype()), x.device());
  r.rstd = Tensor::empty(row_shape(x.shape()), accumulation_dtype(x.dtype()), x.device());
  std::vector<Tensor> outs{r.y, r.mean, r.rstd};
  dispatch("layernorm", {x.contiguous(), gamma.contiguous(), beta.contiguous()}, outs, Attrs().set("eps", eps));
  return r;
}

AddLayerNormOutput add_layernorm(const Tensor& a, const Tensor& b, const Tensor& gamma, const Tensor& beta,
                                 double eps, std::optional<DType> y_dtype) {
  const char* op = "add_layernorm";
  check_layernorm_args(op, a, gamma, beta, eps);
  check_float_like(op, "b", b, "a", a, true);
  const bool suffix = b.dim() >= 1 && b.dim() <= a.dim() &&
                      std::equal(b.shape().begin(), b.shape().end(), a.shape().end() - b.dim());
  TROUPE_CHECK(suffix, shape_mismatch, op, ": b has shape ", shape_str(b.shape()), ", which is not made of the last dims of a ",
               shape_str(a.shape()), "; pass the full-size operand as a");
  AddLayerNormOutput r;
  r.sum = Tensor::empty(a.shape(), a.dtype(), a.device());
  r.y = Tensor::empty(a.shape(), y_dtype_of(op, a, y_dtype), a.device());
  r.mean = Tensor::empty(row_shape(a.shape()), accumulation_dtype(a.dtype()), a.device());
  r.rstd = Tensor::empty(row_shape(a.shape()), accumulation_dtype(a.dtype()), a.device());
  std::vector<Tensor> outs{r.sum, r.y, r.mean, r.rstd};
  dispatch(op, {a.contiguous(), b.contiguous(), gamma.contiguous(), beta.contiguous()}, outs, Attrs().set("eps", eps));
  return r;
}

LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& more) {
  const char* op = "layernorm_backward";
  check_float(op, "x", x, true);
  check_float_like(op, "dy", dy, "x", x, true);
  check_float_like(op, "gamma", gamma, "x", x, true);
  for (const auto& [role, t] : {std::pair<const char*, const Tensor&>{"mean", mean}, {"rstd", rstd}})
    TROUPE_CHECK(t.defined() && t.dtype() == accumulation_dtype(x.dtype()), dtype_mismatch, op, ": ", role, " ", t.str(),
                 " must be ", dtype_name(accumulation_dtype(x.dtype())), " for x ", x.str(),
                 " (what layernorm returns)");
  TROUPE_CHECK(x.dim() > 0, invalid_argument, op, ": x needs at least one dimension, got ", x.str());
  TROUPE_CHECK(dy.shape() == x.shape(), shape_mismatch, op, ": dy shape ", shape_str(dy.shape()),
               " does not match x shape ", shape_str(x.shape()));
  const std::int64_t d = x.shape().back();
  TROUPE_CHECK(gamma.shape() == Shape{d}, shape_mismatch, op, ": gamma has shape ", shape_str(gamma.shape()),
               ", expected [", d, "]");
  const Shape rows = row_shape(x.shape());
  TROUPE_CHECK(mean.shape() == rows, shape_mismatch, op, ": mean has shape ", shape_str(mean.shape()),
               ", expected ", shape_str(rows));
  TROUPE_CHECK(rstd.shape() == rows, shape_mismatch, op, ": rstd has shape ", shape_str(rstd.shape()),
               ", expected ", shape_str(rows));
  std::vector<Tensor> in{dy.contiguous(), x.contiguous(), gamma.contiguous(), mean.contiguous(), rstd.contiguous()};
  if (more.defined()) {
    check_float_like(op, "more", more, "x", x, true);
    TROUPE_CHECK(more.shape() == x.shape(), shape_mismatch, op, ": the gradient to add has shape ", shape_str(more.shape()),
                 ", expected x's ", shape_str(x.shape()));
    in.push_back(more.contiguous());
  }
  LayerNormGrads g;
  g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  g.dgamma = Tensor::empty({d}, x.dtype(), x.device());
  g.dbeta = Tensor::empty({d}, x.dtype(), x.device());
  std::vector<Tensor> outs{g.dx, g.dgamma, g.dbeta};
  dispatch(op, in, outs);
  return g;
}

}  // namespace troupe::kernels
