// CPU layer normalisation over the last dimension. Inputs are made dense by the front end and
// seen as [rows, D]; statistics are accumulated in double.

#include <cmath>

#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in: x, gamma, beta; out: y, mean, rstd; attr "eps".
template <class T>
void layernorm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const T* x = in[0].data<T>();
  const T* g = in[1].data<T>();
  const T* b = in[2].data<T>();
  T* y = out[0].data<T>();
  T* mu = out[1].data<T>();
  T* rs = out[2].data<T>();
  const double eps = a.get_double("eps");
  const std::int64_t d = in[0].shape().back();
  const std::int64_t rows = d > 0 ? in[0].numel() / d : out[1].numel();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* p = x + r * d;
    double s = 0.0;
    for (std::int64_t i = 0; i < d; ++i) s += p[i];
    const double m = s / static_cast<double>(d);
    double v = 0.0;
    for (std::int64_t i = 0; i < d; ++i) v += (p[i] - m) * (p[i] - m);
    v /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(v + eps);
    for (std::int64_t i = 0; i < d; ++i) y[r * d + i] = static_cast<T>((p[i] - m) * rstd * g[i] + b[i]);
    mu[r] = static_cast<T>(m);
    rs[r] = static_cast<T>(rstd);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("layernorm", layernorm_kernel);

// in: dy, x, gamma, mean, rstd; out: dx, dgamma, dbeta.
template <class T>
void layernorm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* dy = in[0].data<T>();
  const T* x = in[1].data<T>();
  const T* g = in[2].data<T>();
  const T* mu = in[3].data<T>();
  const T* rs = in[4].data<T>();
  T* dx = out[0].data<T>();
  T* dg = out[1].data<T>();
  T* db = out[2].data<T>();
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
      dx[r * d + i] = static_cast<T>(rstd * (dxh - s1 - xh * s2));
    }
  }
  for (std::int64_t i = 0; i < d; ++i) {
    dg[i] = static_cast<T>(dgs[i]);
    db[i] = static_cast<T>(dbs[i]);
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("layernorm_backward", layernorm_backward_kernel);

}  // namespace
}  // namespace troupe
