// The builder functions: each names its op and packs its attributes; apply() does the rest.
#include "troupe/graph/ops.hpp"

#include <limits>

namespace troupe::graph {

namespace {
Attrs axes_attrs(const std::vector<std::int64_t>& axes, bool keepdim) {
  return Attrs().set("axes", axes).set("keepdim", std::int64_t{keepdim});
}
}  // namespace

Var add(const Var& a, const Var& b) { return apply1("add", {a, b}); }
Var sub(const Var& a, const Var& b) { return apply1("sub", {a, b}); }
Var mul(const Var& a, const Var& b) { return apply1("mul", {a, b}); }
Var div(const Var& a, const Var& b) { return apply1("div", {a, b}); }
Var operator+(const Var& a, const Var& b) { return add(a, b); }
Var operator-(const Var& a, const Var& b) { return sub(a, b); }
Var operator*(const Var& a, const Var& b) { return mul(a, b); }
Var operator/(const Var& a, const Var& b) { return div(a, b); }
Var operator+(const Var& a, double s) { return apply1("add_scalar", {a}, Attrs().set("s", s)); }
Var operator-(const Var& a, double s) { return a + (-s); }
Var operator*(const Var& a, double s) { return apply1("mul_scalar", {a}, Attrs().set("s", s)); }
Var operator/(const Var& a, double s) { return a * (1.0 / s); }
Var operator+(double s, const Var& a) { return a + s; }
Var operator-(double s, const Var& a) { return neg(a) + s; }
Var operator*(double s, const Var& a) { return a * s; }
Var operator-(const Var& a) { return neg(a); }

Var neg(const Var& x) { return apply1("neg", {x}); }
Var exp(const Var& x) { return apply1("exp", {x}); }
Var log(const Var& x) { return apply1("log", {x}); }
Var tanh(const Var& x) { return apply1("tanh", {x}); }
Var sqrt(const Var& x) { return apply1("sqrt", {x}); }
Var rsqrt(const Var& x) { return apply1("rsqrt", {x}); }
Var relu(const Var& x) { return apply1("relu", {x}); }
Var gelu(const Var& x) { return apply1("gelu", {x}); }
Var silu(const Var& x) { return apply1("silu", {x}); }
Var relu_backward(const Var& grad, const Var& x, double negative_slope) {
  return apply1("relu_backward", {grad, x}, Attrs().set("slope", negative_slope));
}

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b) {
  return apply1("matmul", {a, b},
                Attrs().set("trans_a", std::int64_t{trans_a}).set("trans_b", std::int64_t{trans_b}));
}

Var sum(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("sum", {x}, axes_attrs(axes, keepdim));
}
Var mean(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("mean", {x}, axes_attrs(axes, keepdim));
}
Var max(const Var& x, const std::vector<std::int64_t>& axes, bool keepdim) {
  return apply1("max", {x}, axes_attrs(axes, keepdim));
}
Var squared_norm(const Var& x) { return apply1("squared_norm", {x}); }
Var sum_to(const Var& x, const Var& like) { return apply1("sum_to", {x, like}); }
Var broadcast_to(const Var& x, const Var& like) { return apply1("broadcast_to", {x, like}); }

Var reshape(const Var& x, const SymShape& shape) { return apply1("reshape", {x}, {}, shape); }
Var transpose(const Var& x, std::int64_t a, std::int64_t b) {
  const auto rank = static_cast<std::size_t>(x.dim());
  std::vector<std::int64_t> dims(rank);
  for (std::size_t i = 0; i < rank; ++i) dims[i] = static_cast<std::int64_t>(i);
  std::swap(dims.at(static_cast<std::size_t>(normalize_axis(a, rank, "transpose"))),
            dims.at(static_cast<std::size_t>(normalize_axis(b, rank, "transpose"))));
  return permute(x, dims);
}
Var permute(const Var& x, const std::vector<std::int64_t>& dims) {
  return apply1("permute", {x}, Attrs().set("dims", dims));
}
Var concat(const std::vector<Var>& xs, std::int64_t axis) { return apply1("concat", xs, Attrs().set("axis", axis)); }
std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, std::int64_t axis) {
  return apply("split", {x}, Attrs().set("sizes", sizes).set("axis", axis));
}
Var pixel_shuffle(const Var& x, std::int64_t r) { return apply1("pixel_shuffle", {x}, Attrs().set("r", r)); }
Var pixel_unshuffle(const Var& x, std::int64_t r) { return apply1("pixel_unshuffle", {x}, Attrs().set("r", r)); }
Var cast(const Var& x, DType dtype) {
  return apply1("cast", {x}, Attrs().set("dtype", static_cast<std::int64_t>(dtype)));
}
Var stop_gradient(const Var& x) { return apply1("stop_gradient", {x}); }
Var zeros_like(const Var& x) { return apply1("zeros_like", {x}); }

Var softmax(const Var& x, std::int64_t axis) { return apply1("softmax", {x}, Attrs().set("axis", axis)); }
Var log_softmax(const Var& x, std::int64_t axis) { return apply1("log_softmax", {x}, Attrs().set("axis", axis)); }
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  return apply("layer_norm", {x, gamma, beta}, Attrs().set("eps", eps))[0];
}
Var embedding(const Var& weight, const Var& ids) { return apply1("embedding", {weight, ids}); }
Var cross_entropy(const Var& logits, const Var& targets) { return apply1("cross_entropy", {logits, targets}); }
Var mse_loss(const Var& y, const Var& target) {
  const Var d = y - target;
  return mean(d * d);
}
Var conv2d(const Var& x, const Var& w, const Var& bias, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w, bias}, Attrs().set("stride", stride).set("padding", padding));
}
Var conv2d(const Var& x, const Var& w, std::int64_t stride, std::int64_t padding) {
  return apply1("conv2d", {x, w}, Attrs().set("stride", stride).set("padding", padding));
}
Var causal_mask(const Var& x) {
  return apply1("causal_mask", {x}, Attrs().set("fill", -std::numeric_limits<double>::infinity()));
}

}  // namespace troupe::graph
