// CPU reductions. The front end makes the input dense and permutes reduced axes last, so the
// kernel sees [outer, inner] with the inner block reduced.

#include "troupe/kernels/reduce.hpp"

#include <cmath>
#include <limits>

#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in[0]: dense [outer * inner]; out[0]: dense [outer]; attr "inner", "mode" (0 sum, 1 mean, 2 max).
template <class T>
void reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  const std::int64_t inner = a.get_int("inner");
  const std::int64_t mode = a.get_int("mode");
  const std::int64_t outer = out[0].numel();
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* p = x + o * inner;
    if (mode == 2) {
      T m = -std::numeric_limits<T>::infinity();
      bool nan = false;
      for (std::int64_t i = 0; i < inner; ++i) {
        if (std::isnan(p[i])) nan = true;
        if (p[i] > m) m = p[i];
      }
      y[o] = nan ? std::numeric_limits<T>::quiet_NaN() : m;
    } else {
      double s = 0.0;
      for (std::int64_t i = 0; i < inner; ++i) s += p[i];
      if (mode == 1) s = inner > 0 ? s / static_cast<double>(inner) : std::numeric_limits<double>::quiet_NaN();
      y[o] = static_cast<T>(s);
    }
  }
}
TROUPE_REGISTER_FLOAT_KERNELS("reduce", reduce_kernel);

Tensor reduce_impl(const char* op, const Tensor& x, std::vector<std::int64_t> axes, bool keepdim,
                   std::int64_t mode) {
  cpu::check_float(op, "input", x);
  const std::size_t rank = x.shape().size();
  std::vector<bool> reduced(rank, axes.empty());
  for (auto ax : axes) {
    const int n = normalize_axis(ax, rank, op);
    TROUPE_CHECK(!reduced[n], invalid_argument, op, ": axis ", ax, " appears twice in the axes of ", x.str());
    reduced[n] = true;
  }
  std::vector<std::int64_t> perm;
  Shape out_shape, keep_shape;
  std::int64_t inner = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    if (!reduced[i]) {
      perm.push_back(static_cast<std::int64_t>(i));
      out_shape.push_back(x.shape()[i]);
      keep_shape.push_back(x.shape()[i]);
    } else {
      keep_shape.push_back(1);
    }
  }
  for (std::size_t i = 0; i < rank; ++i)
    if (reduced[i]) {
      perm.push_back(static_cast<std::int64_t>(i));
      inner *= x.shape()[i];
    }
  if (mode == 2)
    TROUPE_CHECK(inner > 0, invalid_argument, op, ": cannot take the max over an empty extent of ", x.str());
  Tensor dense = (rank > 0 ? x.permute(perm) : x).contiguous();
  Tensor out = Tensor::empty(keepdim ? keep_shape : out_shape, x.dtype());
  std::vector<Tensor> outs{out};
  dispatch("reduce", {dense}, outs, Attrs().set("inner", inner).set("mode", mode));
  return out;
}

}  // namespace

namespace ops {

Tensor sum(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("sum", x, std::move(axes), keepdim, 0);
}

Tensor mean(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("mean", x, std::move(axes), keepdim, 1);
}

Tensor max(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("max", x, std::move(axes), keepdim, 2);
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  TROUPE_CHECK(x.defined(), invalid_argument, "sum_to_shape: the input tensor is undefined");
  const Shape& xs = x.shape();
  TROUPE_CHECK(shape.size() <= xs.size(), shape_mismatch, "sum_to_shape: target shape ", shape_str(shape),
               " has more dims than the input ", x.str());
  const std::size_t lead = xs.size() - shape.size();
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (i < lead) {
      axes.push_back(static_cast<std::int64_t>(i));
      continue;
    }
    const std::int64_t t = shape[i - lead];
    if (t == xs[i]) continue;
    TROUPE_CHECK(t == 1, shape_mismatch, "sum_to_shape: shape ", shape_str(shape),
                 " does not broadcast to the input ", x.str());
    axes.push_back(static_cast<std::int64_t>(i));
  }
  if (axes.empty()) return x.clone().reshape(shape);
  Tensor r = reduce_impl("sum_to_shape", x, axes, true, 0);
  return r.reshape(shape);
}

}  // namespace ops
}  // namespace troupe
