#include "troupe/graph/nn.hpp"

#include <array>
#include <cmath>

#include "troupe/graph/dropout.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
Tensor uniform(const Shape& shape, double bound, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  gen.uniform_(t, -bound, bound);
  return t;
}
void check_positive(const char* layer, const char* what, std::int64_t v) {
  TROUPE_CHECK(v > 0, invalid_argument, layer, ": ", what, " must be positive, got ", v);
}
}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, Generator& gen, bool with_bias) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, bound, gen));
}
Var Linear::forward(const Var& x) {
  const Var y = matmul(x, weight, false, true);
  return bias.defined() ? y + bias : y;
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, Generator& gen, double init_std) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "dim", dim);
  Tensor w = Tensor::empty({num_embeddings, dim});
  gen.normal_(w, 0.0, init_std);
  weight = register_parameter("weight", w);
}
Var Embedding::forward(const Var& ids) { return embedding(weight, ids); }

LayerNorm::LayerNorm(std::int64_t dim, double eps) : eps(eps) {
  check_positive("LayerNorm", "dim", dim);
  weight = register_parameter("weight", Tensor::full({dim}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}
Var LayerNorm::forward(const Var& x) { return layer_norm(x, weight, bias, eps); }

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Generator& gen,
               std::int64_t stride, std::int64_t padding, bool with_bias)
    : stride(stride), padding(padding) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "kernel_size", kernel_size);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel_size * kernel_size));
  weight = register_parameter("weight", uniform({out_channels, in_channels, kernel_size, kernel_size}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform({out_channels}, bound, gen));
}
Var Conv2d::forward(const Var& x) {
  return bias.defined() ? conv2d(x, weight, bias, stride, padding) : conv2d(x, weight, stride, padding);
}

Var ReLU::forward(const Var& x) { return relu(x); }
Var PixelShuffle::forward(const Var& x) { return pixel_shuffle(x, upscale); }

CausalSelfAttention::CausalSelfAttention(std::int64_t dim, std::int64_t heads, Generator& gen)
    : dim(dim), heads(heads) {
  check_positive("CausalSelfAttention", "heads", heads);
  TROUPE_CHECK(dim % heads == 0, invalid_argument, "CausalSelfAttention: dim ", dim, " is not divisible by ", heads,
               " heads");
  qkv = register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, gen));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim, gen));
}
namespace {

// q, k, v of x [B, n, dim] as [B, heads, n, head_dim].
std::array<Var, 3> heads_of(CausalSelfAttention& a, const Var& x) {
  TROUPE_CHECK(x.dim() == 3, shape_mismatch, "CausalSelfAttention: x must be [batch, time, ", a.dim, "], got ",
               sym_shape_str(x.shape()));
  const SymDim b = x.size(0), t = x.size(1);
  auto parts = split((*a.qkv)(x), {a.dim, a.dim, a.dim}, -1);
  std::array<Var, 3> qkv;
  for (std::size_t i = 0; i < 3; ++i) qkv[i] = parts[i].reshape({b, t, a.heads, a.dim / a.heads}).permute({0, 2, 1, 3});
  return qkv;
}

// The output projection of the heads' results y [B, H, n, hd], merged back to [B, n, dim].
Var project(CausalSelfAttention& a, const Var& y) {
  return (*a.proj)(y.permute({0, 2, 1, 3}).reshape({y.size(0), y.size(2), a.dim}));
}

// softmax(scale q k^T, causal) v, projected: [B, n, dim]; dropout `p` on the probabilities.
Var attend(CausalSelfAttention& a, const Var& q, const Var& k, const Var& v, double p) {
  const Var scores = matmul(q, k, false, true) * (1.0 / std::sqrt(static_cast<double>(a.dim / a.heads)));
  return project(a, matmul(dropout(softmax(causal_mask(scores)), p, a.path() + ".dropout"), v));
}

}  // namespace

Var CausalSelfAttention::forward(const Var& x) {
  const auto [q, k, v] = heads_of(*this, x);
  return attend(*this, q, k, v, training() ? dropout : 0);
}

Var CausalSelfAttention::prompt(const Var& x, std::int64_t capacity, KvCache& cache) {
  const auto [q, k, v] = heads_of(*this, x);
  const SymDim n = x.size(1);
  TROUPE_CHECK(n.is_static() && n.size() <= capacity, shape_mismatch, "CausalSelfAttention: a prompt of ", n.str(),
               " positions does not fit a cache of ", capacity);
  // [B, H, n, hd] to [B, H, capacity, hd] with zero rows after the n: the product with the
  // identity stacked on zeros, exact in every dtype.
  Tensor place = Tensor::zeros({capacity, n.size()});
  for (std::int64_t i = 0; i < n.size(); ++i) place.data<float>()[i * n.size() + i] = 1.0f;
  const auto padded = [&](const Var& t) { return n.size() == capacity ? t : matmul(place.to(t.dtype()), t); };
  cache = {padded(k), padded(v)};
  return attend(*this, q, k, v, 0);
}

Var CausalSelfAttention::step(const Var& x, const DecodePosition& at, const KvCache& cache, KvCache& fresh) {
  TROUPE_CHECK(x.dim() == 3 && x.size(1).is_static() && x.size(1).size() == 1, shape_mismatch,
               "CausalSelfAttention: a decoding step takes one position [batch, 1, ", dim, "], got ", sym_shape_str(x.shape()));
  TROUPE_CHECK(cache.k.defined() && cache.v.defined(), invalid_argument,
               "CausalSelfAttention: a decoding step needs the cache its prompt filled");
  const auto [q, k, v] = heads_of(*this, x);
  fresh = {k, v};
  // The cache stays read-only: the new position's score joins the cached ones (those before the
  // row's position, by `bias`) in one softmax, and its value is weighted in separately, so a step
  // reads the cache once and writes nothing of it (write_step() then stores the new position).
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim / heads));
  const Var cached = matmul(q, cache.k, false, true) * scale + at.bias;  // [B, H, 1, capacity]
  const Var own = matmul(q, k, false, true) * scale;                     // [B, H, 1, 1]
  const std::int64_t capacity = cache.k.size(2).size();
  const std::vector<Var> p = split(softmax(concat({cached, own}, -1)), {capacity, 1}, -1);
  return project(*this, matmul(p[0], cache.v) + p[1] * v);
}

DecodePosition decode_position(const Var& positions, std::int64_t capacity, DType dtype) {
  check_positive("decode_position", "capacity", capacity);
  // Row p of `before` is 0 before p and -inf from p on.
  Tensor before = Tensor::zeros({capacity, capacity});
  for (std::int64_t p = 0; p < capacity; ++p)
    for (std::int64_t j = p; j < capacity; ++j) before.data<float>()[p * capacity + j] = -INFINITY;
  return {embedding(before.to(dtype), positions).reshape({positions.size(0), 1, 1, capacity})};
}

void write_step(const Tensor& cache, const Tensor& fresh, const std::vector<std::int64_t>& positions) {
  TROUPE_CHECK(cache.dim() == 4 && fresh.dim() == 4 && fresh.size(2) == 1 &&
                   fresh.size(0) == static_cast<std::int64_t>(positions.size()) && cache.size(0) >= fresh.size(0),
               shape_mismatch, "write_step: ", positions.size(), " positions for a cache ", shape_str(cache.shape()),
               " and a step ", shape_str(fresh.shape()), "; give one position per row of the step");
  for (std::size_t r = 0; r < positions.size(); ++r) {
    const auto row = static_cast<std::int64_t>(r), p = positions[r];
    TROUPE_CHECK(p >= 0 && p < cache.size(2), invalid_argument, "write_step: row ", r, " at position ", p,
                 " is outside the cache's ", cache.size(2), " positions");
    cache.slice(0, row, row + 1).slice(2, p, p + 1).copy_from(fresh.slice(0, row, row + 1));
  }
}

MLP::MLP(std::int64_t dim, std::int64_t hidden, Generator& gen) {
  fc = register_module("fc", std::make_shared<Linear>(dim, hidden, gen));
  proj = register_module("proj", std::make_shared<Linear>(hidden, dim, gen));
}
Var MLP::forward(const Var& x) { return (*proj)(gelu((*fc)(x))); }

GPTBlock::GPTBlock(std::int64_t dim, std::int64_t heads, Generator& gen, std::int64_t hidden) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(dim, heads, gen));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  mlp = register_module("mlp", std::make_shared<MLP>(dim, hidden > 0 ? hidden : 4 * dim, gen));
}
Var GPTBlock::forward(const Var& x) {
  const double p = training() ? dropout : 0;
  const Var h = x + graph::dropout((*attn)((*ln1)(x)), p, path() + ".attn_residual");
  return h + graph::dropout((*mlp)((*ln2)(h)), p, path() + ".mlp_residual");
}
Var GPTBlock::prompt(const Var& x, std::int64_t capacity, KvCache& cache) {
  const Var h = x + attn->prompt((*ln1)(x), capacity, cache);
  return h + (*mlp)((*ln2)(h));
}
Var GPTBlock::step(const Var& x, const DecodePosition& at, const KvCache& cache, KvCache& fresh) {
  const Var h = x + attn->step((*ln1)(x), at, cache, fresh);
  return h + (*mlp)((*ln2)(h));
}

Sequential& Sequential::add(std::shared_ptr<Layer> layer) {
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
  return *this;
}
Var Sequential::forward(const Var& x) {
  Var h = x;
  for (const auto& layer : layers_) h = (*layer)(h);
  return h;
}

}  // namespace troupe::graph
