// The reduction front ends: axis checks, the view of the input the kernel reduces (dense, reduced
// dims in one run), dispatch.
#include "troupe/kernels/reduce.hpp"

#include <algorithm>

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// Sum (mode 0), mean (1) or max (2) of x over `axes` (all when empty); `op` names the caller in
// errors.
// The result is written in `out_dtype`: x's own, or f32 for the partial sums of a bf16 or f16
// reduction in several passes, which round once, at the last.
Tensor reduce_impl(const char* op, const Tensor& x, std::vector<std::int64_t> axes, bool keepdim,
                   std::int64_t mode, DType out_dtype) {
  check_float(op, "input", x, true);
  const std::size_t rank = x.shape().size();
  std::vector<bool> reduced(rank, axes.empty());
  for (auto ax : axes) {
    const int n = normalize_axis(ax, rank, op);
    TROUPE_CHECK(!reduced[n], invalid_argument, op, ": axis ", ax, " appears twice in the axes of ", x.str());
    reduced[n] = true;
  }
  Shape out_shape, keep_shape;
  std::int64_t extent = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    keep_shape.push_back(reduced[i] ? 1 : x.shape()[i]);
    if (reduced[i]) extent *= x.shape()[i];
    else out_shape.push_back(x.shape()[i]);
  }
  if (mode == 2)
    TROUPE_CHECK(extent > 0, invalid_argument, op, ": cannot take the max over an empty extent of ", x.str());
  // When the reduced dims (ignoring size-1 dims) form one run, the kernel reads x in place as
  // [outer, extent, inner]; otherwise they are permuted last first (inner = 1).
  std::size_t first = rank, last = 0;
  for (std::size_t i = 0; i < rank; ++i)
    if (reduced[i] && x.shape()[i] != 1) {
      first = std::min(first, i);
      last = i;
    }
  bool one_run = true;
  for (std::size_t i = first; i < rank && i <= last; ++i) one_run = one_run && (reduced[i] || x.shape()[i] == 1);
  if (!one_run && mode != 1) {
    // Two runs or more (bias gradients of NCHW: axes 0, 2, 3): reduce the last run first, then
    // the rest. Each pass streams through memory, which a transposed copy of x would not.
    std::vector<std::int64_t> last_run, rest;
    std::size_t i = last + 1;
    while (i-- > first && (reduced[i] || x.shape()[i] == 1))
      if (reduced[i]) last_run.push_back(static_cast<std::int64_t>(i));
    for (std::size_t k = 0; k <= i && k < rank; ++k)
      if (reduced[k]) rest.push_back(static_cast<std::int64_t>(k));
    const DType partial_dtype = is_low_precision(x.dtype()) ? DType::f32 : x.dtype();
    const Tensor partial = reduce_impl(op, x, last_run, /*keepdim=*/true, mode, partial_dtype);
    return reduce_impl(op, partial, rest, /*keepdim=*/true, mode, out_dtype).reshape(keepdim ? keep_shape : out_shape);
  }
  Tensor dense;
  std::int64_t inner = 1;
  if (one_run) {
    dense = x.contiguous();
    for (std::size_t i = last + 1; i < rank && first < rank; ++i) inner *= x.shape()[i];
  } else {
    std::vector<std::int64_t> perm;
    for (std::size_t i = 0; i < rank; ++i)
      if (!reduced[i]) perm.push_back(static_cast<std::int64_t>(i));
    for (std::size_t i = 0; i < rank; ++i)
      if (reduced[i]) perm.push_back(static_cast<std::int64_t>(i));
    dense = x.permute(perm).contiguous();
  }
  Tensor out = Tensor::empty(keepdim ? keep_shape : out_shape, out_dtype, x.device());
  std::vector<Tensor> outs{out};
  dispatch("reduce", {dense}, outs, Attrs().set("extent", extent).set("inner", inner).set("mode", mode));
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("sum", x, std::move(axes), keepdim, 0, x.dtype());
}

Tensor mean(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("mean", x, std::move(axes), keepdim, 1, x.dtype());
}

Tensor max(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce_impl("max", x, std::move(axes), keepdim, 2, x.dtype());
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
  Tensor r = reduce_impl("sum_to_shape", x, axes, true, 0, x.dtype());
  return r.reshape(shape);
}

}  // namespace troupe::kernels
