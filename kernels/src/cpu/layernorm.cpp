// CPU layer normalisation over the last dimension. Inputs are made dense by the front end and
// seen as [rows, D]; statistics are accumulated in double.

#include "troupe/kernels/layernorm.hpp"

#include <cmath>

#include "troupe/kernels/registry.hpp"

namespace troupe {
namespace {

// in: x, gamma, beta; out: y, mean, rstd; attr "eps".
void layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const float* x = in[0].data<float>();
  const float* g = in[1].data<float>();
  const float* b = in[2].data<float>();
  float* y = out[0].data<float>();
  float* mu = out[1].data<float>();
  float* rs = out[2].data<float>();
  const double eps = a.get_double("eps");
  const std::int64_t d = in[0].shape().back();
  const std::int64_t rows = d > 0 ? in[0].numel() / d : out[1].numel();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * d;
    double s = 0.0;
    for (std::int64_t i = 0; i < d; ++i) s += p[i];
    const double m = s / static_cast<double>(d);
    double v = 0.0;
    for (std::int64_t i = 0; i < d; ++i) v += (p[i] - m) * (p[i] - m);
    v /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(v + eps);
    for (std::int64_t i = 0; i < d; ++i) y[r * d + i] = static_cast<float>((p[i] - m) * rstd * g[i] + b[i]);
    mu[r] = static_cast<float>(m);
    rs[r] = static_cast<float>(rstd);
  }
}
TROUPE_REGISTER_KERNEL("layernorm", cpu, f32, layernorm_kernel);

// in: dy, x, gamma, mean, rstd; out: dx, dgamma, dbeta.
void layernorm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const float* dy = in[0].data<float>();
  const float* x = in[1].data<float>();
  const float* g = in[2].data<float>();
  const float* mu = in[3].data<float>();
  const float* rs = in[4].data<float>();
  float* dx = out[0].data<float>();
  float* dg = out[1].data<float>();
  float* db = out[2].data<float>();
  const std::int64_t d = in[1].shape().back();
  const std::int64_t rows = in[3].numel();
  std::vector<double> dgs(static_cast<std::size_t>(d), 0.0), dbs(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double m = mu[r], rstd = rs[r];
    double s1 = 0.0, s2 = 0.0;  // mean of dxhat, mean of dxhat * xhat
    for (std::int64_t i = 0; i < d; ++i) {
      const double xh = (x[r * d + i] - m) * rstd;
      const double gy = dy[r * d + i];
      const double dxh = gy * g[i];
      s1 += dxh;
      s2 += dxh * xh;
      dgs[i] += gy * xh;
      dbs[i] += gy;
    }
    s1 /= static_cast<double>(d);
    s2 /= static_cast<double>(d);
    for (std::int64_t i = 0; i < d; ++i) {
      const double xh = (x[r * d + i] - m) * rstd;
      const double dxh = static_cast<double>(dy[r * d + i]) * g[i];
      dx[r * d + i] = static_cast<float>(rstd * (dxh - s1 - xh * s2));
    }
  }
  for (std::int64_t i = 0; i < d; ++i) {
    dg[i] = static_cast<float>(dgs[i]);
    db[i] = static_cast<float>(dbs[i]);
  }
}
TROUPE_REGISTER_KERNEL("layernorm_backward", cpu, f32, layernorm_backward_kernel);

void check_f32(const char* op, const char* what, const Tensor& t) {
  TROUPE_CHECK(t.defined(), invalid_argument, op, ": ", what, " is undefined");
  TROUPE_CHECK(t.dtype() == DType::f32, dtype_mismatch, op, ": ", what, " must be f32, got ", t.str());
}

Shape row_shape(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

}  // namespace

namespace ops {

LayerNormOutput layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_f32("layernorm", "x", x);
  check_f32("layernorm", "gamma", gamma);
  check_f32("layernorm", "beta", beta);
  TROUPE_CHECK(x.dim() > 0, invalid_argument, "layernorm: x needs at least one dimension, got ", x.str());
  const std::int64_t d = x.shape().back();
  TROUPE_CHECK(d > 0, invalid_argument, "layernorm: the last dim of x is empty: ", x.str());
  TROUPE_CHECK(gamma.shape() == Shape{d}, shape_mismatch, "layernorm: gamma has shape ", shape_str(gamma.shape()),
               ", expected [", d, "] for x ", shape_str(x.shape()));
  TROUPE_CHECK(beta.shape() == Shape{d}, shape_mismatch, "layernorm: beta has shape ", shape_str(beta.shape()),
               ", expected [", d, "] for x ", shape_str(x.shape()));
  TROUPE_CHECK(eps >= 0.0, invalid_argument, "layernorm: eps must be >= 0, got ", eps);
  LayerNormOutput r;
  r.y = Tensor::empty(x.shape(), DType::f32, x.device());
  r.mean = Tensor::empty(row_shape(x.shape()), DType::f32, x.device());
  r.rstd = Tensor::empty(row_shape(x.shape()), DType::f32, x.device());
  std::vector<Tensor> outs{r.y, r.mean, r.rstd};
  dispatch("layernorm", {x.contiguous(), gamma.contiguous(), beta.contiguous()}, outs, Attrs().set("eps", eps));
  return r;
}

LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_f32(op, "dy", dy);
  check_f32(op, "x", x);
  check_f32(op, "gamma", gamma);
  check_f32(op, "mean", mean);
  check_f32(op, "rstd", rstd);
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
  LayerNormGrads g;
  g.dx = Tensor::empty(x.shape(), DType::f32, x.device());
  g.dgamma = Tensor::empty({d}, DType::f32, x.device());
  g.dbeta = Tensor::empty({d}, DType::f32, x.device());
  std::vector<Tensor> outs{g.dx, g.dgamma, g.dbeta};
  dispatch("layernorm_backward",
           {dy.contiguous(), x.contiguous(), gamma.contiguous(), mean.contiguous(), rstd.contiguous()}, outs);
  return g;
}

}  // namespace ops
}  // namespace troupe
