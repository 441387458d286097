// Element-moving ops expressed as views plus one strided copy (Tensor::copy_from), so they work for
// every dtype and layout without kernels of their own.
#include "troupe/kernels/layout.hpp"

namespace troupe::kernels {

Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis) {
  TROUPE_CHECK(!xs.empty(), invalid_argument, "concat: needs at least one tensor");
  const Tensor& first = xs[0];
  TROUPE_CHECK(first.defined(), invalid_argument, "concat: input 0 is undefined");
  const int ax = normalize_axis(axis, first.shape().size(), "concat");
  Shape out_shape = first.shape();
  out_shape[ax] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    TROUPE_CHECK(t.defined() && t.dtype() == first.dtype() && t.device() == first.device(), dtype_mismatch,
                 "concat: input ", i, " ", t.str(), " differs in dtype or device from input 0 ", first.str());
    bool fits = t.dim() == first.dim();
    for (int d = 0; fits && d < first.dim(); ++d) fits = d == ax || t.shape()[d] == first.shape()[d];
    TROUPE_CHECK(fits, shape_mismatch, "concat: input ", i, " has shape ", shape_str(t.shape()), ", input 0 has ",
                 shape_str(first.shape()), "; only dimension ", ax, " may differ");
    out_shape[ax] += t.shape()[ax];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  std::int64_t at = 0;
  for (const Tensor& t : xs) {
    out.slice(ax, at, at + t.shape()[ax]).copy_from(t);
    at += t.shape()[ax];
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  TROUPE_CHECK(x.defined(), invalid_argument, "split: undefined input");
  const int ax = normalize_axis(axis, x.shape().size(), "split");
  std::int64_t total = 0;
  for (auto s : sizes) {
    TROUPE_CHECK(s >= 0, invalid_argument, "split: negative size ", s);
    total += s;
  }
  TROUPE_CHECK(total == x.shape()[ax], shape_mismatch, "split: sizes sum to ", total, " but dimension ", ax, " of ",
               shape_str(x.shape()), " is ", x.shape()[ax]);
  std::vector<Tensor> parts;
  std::int64_t at = 0;
  for (auto s : sizes) {
    parts.push_back(x.slice(ax, at, at + s));
    at += s;
  }
  return parts;
}

namespace {
void check_4d(const char* op, const Tensor& x, std::int64_t r) {
  TROUPE_CHECK(x.defined() && x.dim() == 4, shape_mismatch, op, ": input must be NCHW (rank 4), got ", x.str());
  TROUPE_CHECK(r >= 1, invalid_argument, op, ": factor must be >= 1, got ", r);
}
}  // namespace

Tensor pixel_shuffle(const Tensor& x, std::int64_t r) {
  check_4d("pixel_shuffle", x, r);
  const auto& s = x.shape();
  TROUPE_CHECK(s[1] % (r * r) == 0, shape_mismatch, "pixel_shuffle: channels ", s[1], " of ", shape_str(s),
               " are not divisible by r*r = ", r * r);
  const std::int64_t c = s[1] / (r * r);
  // [N, C, r, r, H, W] -> [N, C, H, r, W, r]
  Tensor v = x.reshape({s[0], c, r, r, s[2], s[3]}).permute({0, 1, 4, 2, 5, 3});
  return v.contiguous().view({s[0], c, s[2] * r, s[3] * r});
}

Tensor pixel_unshuffle(const Tensor& x, std::int64_t r) {
  check_4d("pixel_unshuffle", x, r);
  const auto& s = x.shape();
  TROUPE_CHECK(s[2] % r == 0 && s[3] % r == 0, shape_mismatch, "pixel_unshuffle: spatial size of ", shape_str(s),
               " is not divisible by ", r);
  const std::int64_t h = s[2] / r, w = s[3] / r;
  // [N, C, H, r, W, r] -> [N, C, r, r, H, W]
  Tensor v = x.reshape({s[0], s[1], h, r, w, r}).permute({0, 1, 3, 5, 2, 4});
  return v.contiguous().view({s[0], s[1] * r * r, h, w});
}

}  // namespace troupe::kernels
