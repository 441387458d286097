#include "troupe/apps/gpt_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "troupe/apps/splitmix.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {

using graph::Var;

namespace {

// {logits, k0, v0, k1, v1, ...}: what the prompt and step functions return.
std::vector<Var> with_caches(const Var& logits, const std::vector<graph::KvCache>& caches) {
  std::vector<Var> out{logits};
  for (const graph::KvCache& c : caches) {
    out.push_back(c.k);
    out.push_back(c.v);
  }
  return out;
}

}  // namespace

GptDecoder::GptDecoder(Gpt& model, graph::AmpOptions amp, bool kv_cache) : model_(model), amp_(amp), kv_cache_(kv_cache) {}

// {logits, k0, v0, k1, v1, ...} of a prompt of n tokens.
graph::Jit& GptDecoder::prompt_jit(std::int64_t n) {
  return traced(prompts_, n, {{"ids", {1, n}, DType::i64}}, [this](const std::vector<Var>& in) {
    std::vector<graph::KvCache> caches;
    const Var logits = model_.prompt_logits(in[0], caches);
    return with_caches(logits, caches);
  });
}

// {logits, k0, v0, ...} of one token per row at its position, after the cached ones.
graph::Jit& GptDecoder::step_jit() {
  const std::int64_t hd = model_.config.d_model / model_.config.heads;
  const graph::SymDim rows = graph::SymDim::symbol("rows");
  std::vector<graph::InputSpec> signature{{"id", {rows, 1}, DType::i64}, {"position", {rows, 1}, DType::i64}};
  for (std::size_t i = 0; i < 2 * model_.block_list.size(); ++i)
    signature.push_back({(i % 2 ? "v" : "k") + std::to_string(i / 2), {rows, model_.config.heads, model_.config.seq, hd},
                         model_.wte->weight.dtype()});
  return traced(steps_, 0, signature, [this](const std::vector<Var>& in) {
    std::vector<graph::KvCache> caches(model_.block_list.size());
    for (std::size_t i = 0; i < caches.size(); ++i) caches[i] = {in[2 + 2 * i], in[3 + 2 * i]};
    const Var logits = model_.step_logits(in[0], in[1], caches);
    return with_caches(logits, caches);
  });
}

namespace {

// Row r of every [rows, vocab]-shaped logits tensor, as f32 vectors.
std::vector<std::vector<float>> rows_of(const Tensor& logits) {
  const Tensor flat = logits.reshape({logits.size(0), logits.shape().back()}).to(DType::f32).contiguous();
  std::vector<std::vector<float>> out;
  for (std::int64_t r = 0; r < flat.size(0); ++r) out.push_back(flat.slice(0, r, r + 1).contiguous().to_vector<float>());
  return out;
}

// The rows `take` of each [rows, ...] tensor, in order, as new dense tensors.
std::vector<Tensor> gather_rows(const std::vector<std::vector<Tensor>>& per_row_sources, const std::vector<std::size_t>& take) {
  std::vector<Tensor> out;
  for (std::size_t c = 0; c < per_row_sources.front().size(); ++c) {
    Shape shape = per_row_sources[take.front()][c].shape();
    shape[0] = static_cast<std::int64_t>(take.size());
    Tensor t = Tensor::empty(shape, per_row_sources[take.front()][c].dtype());
    for (std::size_t i = 0; i < take.size(); ++i)
      t.slice(0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1).copy_from(per_row_sources[take[i]][c]);
    out.push_back(t);
  }
  return out;
}

}  // namespace

std::vector<std::vector<float>> GptDecoder::start(const std::vector<std::vector<std::int64_t>>& prompts) {
  TROUPE_CHECK(!prompts.empty(), invalid_argument, "GptDecoder::start: no prompts");
  std::vector<std::vector<Tensor>> caches;
  std::vector<std::vector<float>> logits;
  positions_.clear();
  for (const std::vector<std::int64_t>& p : prompts) {
    const auto n = static_cast<std::int64_t>(p.size());
    TROUPE_CHECK(n >= 1 && n <= model_.config.seq, invalid_argument, "GptDecoder::start: a prompt of ", n,
                 " tokens; give 1 to ", model_.config.seq, " (the model's positions)");
    std::vector<Tensor> out = prompt_jit(n)({Tensor::from_vector(p, {1, n})});
    logits.push_back(rows_of(out[0].slice(1, n - 1, n)).front());
    caches.emplace_back(out.begin() + 1, out.end());
    positions_.push_back(n);
  }
  std::vector<std::size_t> all(prompts.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  cache_ = gather_rows(caches, all);
  return logits;
}

std::vector<std::vector<float>> GptDecoder::step(const std::vector<std::int64_t>& tokens) {
  TROUPE_CHECK(tokens.size() == positions_.size() && !tokens.empty(), invalid_argument, "GptDecoder::step: ",
               tokens.size(), " tokens for ", positions_.size(), " rows");
  for (std::size_t r = 0; r < positions_.size(); ++r)
    TROUPE_CHECK(positions_[r] < model_.config.seq, invalid_argument, "GptDecoder::step: row ", r, " holds all ",
                 model_.config.seq, " positions; drop it (keep_rows) and continue it with next()");
  const auto b = static_cast<std::int64_t>(tokens.size());
  std::vector<Tensor> in{Tensor::from_vector(tokens, {b, 1}), Tensor::from_vector(positions_, {b, 1})};
  in.insert(in.end(), cache_.begin(), cache_.end());
  std::vector<Tensor> out = step_jit()(in);
  cache_.assign(out.begin() + 1, out.end());
  for (std::int64_t& p : positions_) ++p;
  return rows_of(out[0]);
}

void GptDecoder::keep_rows(const std::vector<bool>& keep) {
  TROUPE_CHECK(keep.size() == positions_.size(), invalid_argument, "GptDecoder::keep_rows: ", keep.size(), " flags for ",
               positions_.size(), " rows");
  std::vector<std::size_t> take;
  std::vector<std::int64_t> positions;
  for (std::size_t r = 0; r < keep.size(); ++r)
    if (keep[r]) {
      take.push_back(r);
      positions.push_back(positions_[r]);
    }
  positions_ = positions;
  if (take.empty()) {
    cache_.clear();
    return;
  }
  std::vector<std::vector<Tensor>> per_row(keep.size());
  for (std::size_t r = 0; r < keep.size(); ++r)
    for (const Tensor& c : cache_) per_row[r].push_back(c.slice(0, static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1));
  cache_ = gather_rows(per_row, take);
}

std::vector<float> GptDecoder::next(const std::vector<std::int64_t>& context) {
  const auto n = static_cast<std::int64_t>(context.size());
  TROUPE_CHECK(n >= 1, invalid_argument, "GptDecoder: the context is empty; give at least one token");
  const std::int64_t seq = model_.config.seq;
  // One row: the context grown by one token steps it; another context within the positions starts it.
  if (kv_cache_ && n <= seq && positions_.size() == 1 && positions_[0] == n - 1) return step({context.back()}).front();
  if (kv_cache_ && n <= seq) return start({context}).front();
  positions_.clear();  // the window slid (or no cache): no row describes it
  cache_.clear();
  const std::int64_t t = std::min(n, seq);
  const Tensor logits =
      window_jit(t)({Tensor::from_vector(std::vector<std::int64_t>(context.end() - t, context.end()), {1, t})})[0];
  return rows_of(logits.slice(1, t - 1, t)).front();
}

// Logits of the last `t` tokens, recomputed.
graph::Jit& GptDecoder::window_jit(std::int64_t t) {
  return traced(windows_, t, {{"ids", {1, t}, DType::i64}},
                [this](const std::vector<Var>& in) { return std::vector<Var>{model_.logits(in[0])}; });
}

// The Jit under `key` in `jits`, traced on first use.
graph::Jit& GptDecoder::traced(std::map<std::int64_t, graph::Jit>& jits, std::int64_t key,
                               std::vector<graph::InputSpec> signature, graph::TraceableFn fn) {
  auto it = jits.find(key);
  if (it == jits.end())
    it = jits.emplace(key, graph::Jit(std::move(fn), std::move(signature), false, graph::jit_level(), amp_)).first;
  return it->second;
}

std::int64_t sample_token(const std::vector<float>& logits, double temperature, std::int64_t top_k, std::uint64_t& rng) {
  TROUPE_CHECK(!logits.empty(), invalid_argument, "sample_token: no logits");
  if (temperature == 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  // Keep the top-k logits, then sample from softmax(logits / temperature).
  std::vector<float> sorted = logits;
  const std::size_t keep = top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), logits.size()) : logits.size();
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(keep - 1), sorted.end(), std::greater<float>());
  const float cutoff = sorted[keep - 1], top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (std::size_t i = 0; i < logits.size(); ++i)
    z += p[i] = logits[i] >= cutoff ? std::exp((logits[i] - top) / temperature) : 0.0;
  double u = uniform01(rng) * z;
  std::int64_t next = 0;
  for (; next + 1 < static_cast<std::int64_t>(p.size()) && u >= p[static_cast<std::size_t>(next)]; ++next)
    u -= p[static_cast<std::size_t>(next)];
  return next;
}

}  // namespace troupe::apps
