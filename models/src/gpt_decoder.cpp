#include "troupe/models/gpt_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "troupe/actors/engine.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/splitmix.hpp"

namespace troupe::models {

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
GptDecoder::~GptDecoder() = default;

// {logits, k0, v0, k1, v1, ...} of prompts of n tokens.
graph::Jit& GptDecoder::prompt_jit(std::int64_t n) {
  return traced(prompts_, n, {{"ids", {graph::SymDim::symbol("rows"), n}, DType::i64}}, [this](const std::vector<Var>& in) {
    std::vector<graph::KvCache> caches;
    const Var logits = model_.prompt_logits(in[0], caches);
    return with_caches(logits, caches);
  });
}

// The step's inputs: one token per row, its position, and every block's cached keys and values.
std::vector<graph::InputSpec> GptDecoder::step_signature() const {
  const std::int64_t hd = model_.config.d_model / model_.config.heads;
  const graph::SymDim rows = graph::SymDim::symbol("rows");
  std::vector<graph::InputSpec> signature{{"id", {rows, 1}, DType::i64}, {"position", {rows, 1}, DType::i64}};
  for (std::size_t i = 0; i < 2 * model_.block_list.size(); ++i)
    signature.push_back({(i % 2 ? "v" : "k") + std::to_string(i / 2), {rows, model_.config.heads, model_.config.seq, hd},
                         model_.wte->weight.dtype()});
  return signature;
}

// {logits, k0, v0, ...} of one token per row at its position, after the cached ones: the keys
// and values of that position alone.
graph::TraceableFn GptDecoder::step_fn() {
  return [this](const std::vector<Var>& in) {
    std::vector<graph::KvCache> caches(model_.block_list.size()), fresh;
    for (std::size_t i = 0; i < caches.size(); ++i) caches[i] = {in[2 + 2 * i], in[3 + 2 * i]};
    const Var logits = model_.step_logits(in[0], in[1], caches, fresh);
    return with_caches(logits, fresh);
  };
}

graph::Jit& GptDecoder::step_jit() {
  if (!step_) step_.emplace(step_fn(), step_signature(), false, graph::jit_level(), amp_);
  return *step_;
}

void GptDecoder::run_steps_on(actors::Engine& engine, int micro_batches) {
  run_steps_on(engine, micro_batches, actors::ProgramOptions{}.group_ops);
}

void GptDecoder::run_steps_on(actors::Engine& engine, int micro_batches, actors::OpGrouping grouping) {
  const int level = graph::jit_level();
  if (level == 0) return;
  actors::ProgramOptions options;
  options.micro_batches = micro_batches;
  options.group_ops = grouping;
  step_program_ =
      engine.compile(graph::trace(step_fn(), step_signature()).with_amp(amp_).for_inference().optimized(level), options);
}

namespace {

// Row r of every [rows, ..., vocab]-shaped logits tensor, as f32 vectors.
std::vector<std::vector<float>> rows_of(const Tensor& logits) {
  const Tensor flat = logits.reshape({logits.size(0), logits.shape().back()}).to(DType::f32).contiguous();
  std::vector<std::vector<float>> out;
  const float* p = flat.data<float>();
  const std::int64_t vocab = flat.size(1);
  for (std::int64_t r = 0; r < flat.size(0); ++r) out.emplace_back(p + r * vocab, p + (r + 1) * vocab);
  return out;
}

// Slots `first` to `first + count` of a [slots, ...] tensor.
Tensor slots(const Tensor& t, std::int64_t first, std::int64_t count = 1) { return t.slice(0, first, first + count); }

}  // namespace

// Room for `rows` rows in every cache tensor, at least doubling, keeping the rows held.
void GptDecoder::reserve_rows(std::int64_t rows) {
  const std::int64_t have = cache_.empty() ? 0 : cache_.front().size(0);
  if (rows <= have) return;
  const std::int64_t hd = model_.config.d_model / model_.config.heads, held = static_cast<std::int64_t>(positions_.size());
  const Shape shape{std::max(rows, 2 * have), model_.config.heads, model_.config.seq, hd};
  std::vector<Tensor> grown;
  for (std::size_t c = 0; c < 2 * model_.block_list.size(); ++c) {
    grown.push_back(Tensor::zeros(shape, model_.wte->weight.dtype()));
    if (held > 0) slots(grown.back(), 0, held).copy_from(slots(cache_[c], 0, held));
  }
  cache_ = std::move(grown);
}

std::vector<std::vector<float>> GptDecoder::add(const std::vector<std::vector<std::int64_t>>& prompts) {
  TROUPE_CHECK(!prompts.empty(), invalid_argument, "GptDecoder::add: no prompts");
  std::map<std::int64_t, std::vector<std::size_t>> by_length;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto n = static_cast<std::int64_t>(prompts[i].size());
    TROUPE_CHECK(n >= 1 && n <= model_.config.seq, invalid_argument, "GptDecoder::add: a prompt of ", n,
                 " tokens; give 1 to ", model_.config.seq, " (the model's positions)");
    by_length[n].push_back(i);
  }
  const auto first = static_cast<std::int64_t>(positions_.size());
  reserve_rows(first + static_cast<std::int64_t>(prompts.size()));
  std::vector<std::vector<float>> logits(prompts.size());
  for (const auto& [n, members] : by_length) {
    std::vector<std::int64_t> ids;
    for (std::size_t i : members) ids.insert(ids.end(), prompts[i].begin(), prompts[i].end());
    const auto g = static_cast<std::int64_t>(members.size());
    const std::vector<Tensor> out = prompt_jit(n)({Tensor::from_vector(ids, {g, n})});
    std::vector<std::vector<float>> last = rows_of(out[0].slice(1, n - 1, n));
    for (std::int64_t j = 0; j < g; ++j) {
      const std::size_t i = members[static_cast<std::size_t>(j)];
      logits[i] = std::move(last[static_cast<std::size_t>(j)]);
      for (std::size_t c = 0; c < cache_.size(); ++c) slots(cache_[c], first + static_cast<std::int64_t>(i)).copy_from(slots(out[1 + c], j));
    }
  }
  for (const std::vector<std::int64_t>& p : prompts) positions_.push_back(static_cast<std::int64_t>(p.size()));
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
  for (const Tensor& c : cache_) in.push_back(slots(c, 0, b));
  const std::vector<Tensor> out = step_program_ ? step_program_->run(in).outputs : step_jit()(in);
  for (std::size_t c = 0; c < cache_.size(); ++c) graph::write_step(cache_[c], out[1 + c], positions_);
  for (std::int64_t& p : positions_) ++p;
  return rows_of(out[0]);
}

void GptDecoder::keep_rows(const std::vector<bool>& keep) {
  TROUPE_CHECK(keep.size() == positions_.size(), invalid_argument, "GptDecoder::keep_rows: ", keep.size(), " flags for ",
               positions_.size(), " rows");
  // Kept rows move down over the dropped ones, in order: a row that stays in its slot costs nothing.
  std::int64_t to = 0;
  for (std::size_t r = 0; r < keep.size(); ++r) {
    if (!keep[r]) continue;
    const auto from = static_cast<std::int64_t>(r);
    if (from != to)
      for (const Tensor& c : cache_) slots(c, to).copy_from(slots(c, from));
    positions_[static_cast<std::size_t>(to++)] = positions_[r];
  }
  positions_.resize(static_cast<std::size_t>(to));
}

std::vector<float> GptDecoder::next(const std::vector<std::int64_t>& context) {
  const auto n = static_cast<std::int64_t>(context.size());
  TROUPE_CHECK(n >= 1, invalid_argument, "GptDecoder: the context is empty; give at least one token");
  const std::int64_t seq = model_.config.seq;
  // One row: the context grown by one token steps it; another context within the positions starts it.
  if (kv_cache_ && n <= seq && positions_.size() == 1 && positions_[0] == n - 1) return step({context.back()}).front();
  positions_.clear();  // another context, or the window slid (or no cache): no row describes it
  if (kv_cache_ && n <= seq) return add({context}).front();
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

std::int64_t sample_token(const std::vector<float>& logits, double temperature, std::int64_t top_k, std::uint64_t& rng,
                          double top_p) {
  TROUPE_CHECK(!logits.empty(), invalid_argument, "sample_token: no logits");
  TROUPE_CHECK(top_p > 0 && top_p <= 1, invalid_argument, "sample_token: top_p must be in (0, 1], got ", top_p);
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
  if (top_p < 1) {
    // The nucleus: the most likely tokens until their mass reaches top_p (at least one).
    std::vector<std::size_t> order(p.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
    double mass = 0;
    std::size_t kept = 0;
    while (kept < order.size() && (kept == 0 || mass < top_p * z)) mass += p[order[kept++]];
    for (std::size_t k = kept; k < order.size(); ++k) p[order[k]] = 0;
    z = mass;
  }
  double u = uniform01(rng) * z;
  std::int64_t next = 0;
  for (; next + 1 < static_cast<std::int64_t>(p.size()) && u >= p[static_cast<std::size_t>(next)]; ++next)
    u -= p[static_cast<std::size_t>(next)];
  return next;
}

double token_logprob(const std::vector<float>& logits, std::int64_t token) {
  TROUPE_CHECK(token >= 0 && token < static_cast<std::int64_t>(logits.size()), out_of_range, "token_logprob: token ", token,
               " is outside the ", logits.size(), " logits");
  const float top = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - top);
  return static_cast<double>(logits[static_cast<std::size_t>(token)]) - top - std::log(z);
}

}  // namespace troupe::models
