// Gradient compression `auto`: after a few uncompressed steps the ranks agree on what they
// measured (each bucket's window, the time between its last gradient and the end of backward, and
// its collective's time and CPU time), and each picks the same compression per bucket: the least
// that keeps the collectives from running past backward and from taking the compute's cores, as
// one-after-another collectives on a link fitted to the measured ones predict.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

#include "grad_compression.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/rng.hpp"

namespace troupe::actors {

double exposed_ms(const std::vector<double>& window_ms, const std::vector<double>& cost_ms) {
  double end = -std::numeric_limits<double>::infinity();
  for (std::size_t b = 0; b < cost_ms.size(); ++b) end = std::max(end, -window_ms[b]) + cost_ms[b];
  return std::max(0.0, end);
}

double step_cost_ms(const std::vector<double>& window_ms, const std::vector<TravelCost>& chosen) {
  std::vector<double> ms;
  double cpu = 0;
  for (const TravelCost& c : chosen) {
    ms.push_back(c.ms);
    cpu += c.cpu_ms;
  }
  return exposed_ms(window_ms, ms) + cpu;
}

std::vector<std::size_t> least_compression(const std::vector<double>& window_ms,
                                           const std::vector<std::vector<TravelCost>>& options, double threshold_ms,
                                           double slack_ms) {
  const std::size_t buckets = options.size();
  std::vector<std::size_t> pick(buckets, 0);
  const auto cost = [&](const std::vector<std::size_t>& p) {
    std::vector<TravelCost> chosen;
    for (std::size_t b = 0; b < buckets; ++b) chosen.push_back(options[b][p[b]]);
    return step_cost_ms(window_ms, chosen);
  };
  double now = cost(pick);
  for (;;) {
    double best = now;
    std::size_t best_b = buckets, best_k = 0;
    for (std::size_t b = 0; b < buckets; ++b)
      for (std::size_t k = pick[b] + 1; k < options[b].size(); ++k) {
        std::vector<std::size_t> trial = pick;
        trial[b] = k;
        if (const double c = cost(trial); c < best) {
          best = c;
          best_b = b;
          best_k = k;
        }
      }
    if (best_b == buckets || now - best <= threshold_ms) break;
    pick[best_b] = best_k;
    now = best;
  }
  // Then as little compression as the slack allows: each bucket in turn takes the weakest option
  // that keeps the cost within slack_ms of the greedy's.
  const double limit = now + slack_ms;
  for (std::size_t b = 0; b < buckets; ++b)
    for (std::size_t k = 0; k < pick[b]; ++k) {
      std::vector<std::size_t> trial = pick;
      trial[b] = k;
      if (cost(trial) <= limit) {
        pick = trial;
        break;
      }
    }
  return pick;
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class Work>
double best_ms(Work work) {
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 3; ++k) {
    const auto start = std::chrono::steady_clock::now();
    work();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// PowerSGD's local work per element of a factored [n, m] matrix at rank r, in ms: the error added,
// the three products and the error kept, as BucketCompressor does them (the matrix capped at 4M
// elements: the work is linear in its rows).
double powersgd_ms_per_element(std::int64_t n, std::int64_t m, std::int64_t r) {
  n = std::max<std::int64_t>(1, std::min(n, (std::int64_t{1} << 22) / std::max<std::int64_t>(1, m)));
  Generator gen(7);
  Tensor grad = Tensor::empty({n, m}), q = Tensor::empty({m, r});
  gen.normal_(grad);
  gen.normal_(q);
  const Tensor error = Tensor::zeros({n, m});
  const double ms = best_ms([&] {
    const Tensor g = kernels::add(grad, error);
    const Tensor p = kernels::matmul(g, q);
    const Tensor q2 = kernels::matmul(g, p, true, false);
    kernels::sub(g, kernels::matmul(p, q2, false, true));
  });
  return ms / static_cast<double>(n * m);
}

// Rounding a bucket to bf16 and back, per element, in ms.
double bf16_ms_per_element() {
  const std::int64_t n = 1 << 20;
  Tensor x = Tensor::empty({n});
  Generator(8).normal_(x);
  return best_ms([&] { x.copy_from(x.to(DType::bf16)); }) / static_cast<double>(n);
}

}  // namespace

void BucketCompressors::decide(transport::ProcessGroup& g) {
  const std::size_t buckets = buckets_.size();
  // PowerSGD's ranks auto may take, least compression first, and the largest matrix they factor.
  std::vector<std::int64_t> ranks;
  for (std::int64_t r = 32; r >= std::max(1, how_.rank); r /= 2) ranks.push_back(r);
  std::int64_t big_n = 0, big_m = 0;
  for (const auto& b : buckets_)
    for (const BucketEntry& e : b->entries())
      if (e.shape.size() >= 2 && shape_numel(e.shape) > big_n * big_m &&
          powersgd_sizes({e}, shape_numel(e.shape), ranks.back()).second > 0) {
        big_n = e.shape[0];
        big_m = shape_numel(e.shape) / e.shape[0];
      }
  // What this rank measured, then the ranks' mean, so that every rank chooses alike.
  std::vector<float> mine;
  for (const auto* measured : {&windows_ms_, &collective_ms_, &collective_cpu_ms_})
    for (std::size_t b = 0; b < buckets; ++b) {
      std::vector<double> v;
      for (const std::vector<double>& round : *measured) v.push_back(round[b]);
      mine.push_back(static_cast<float>(median(v)));
    }
  for (std::int64_t r : ranks) mine.push_back(static_cast<float>(big_n > 0 ? powersgd_ms_per_element(big_n, big_m, r) * 1e6 : 0.0));
  mine.push_back(static_cast<float>(bf16_ms_per_element() * 1e6));
  const Tensor agreed = Tensor::from_vector<float>(mine, {static_cast<std::int64_t>(mine.size())});
  g.all_reduce(agreed, transport::ReduceOp::mean);
  const std::vector<float> v = agreed.to_vector<float>();
  std::vector<double> window(buckets), whole(buckets), whole_cpu(buckets), bytes(buckets), powersgd_per;
  for (std::size_t b = 0; b < buckets; ++b) {
    window[b] = v[b];
    whole[b] = v[buckets + b];
    whole_cpu[b] = v[2 * buckets + b];
    bytes[b] = static_cast<double>(buckets_[b]->numel()) * 4;
  }
  for (std::size_t k = 0; k < ranks.size(); ++k) powersgd_per.push_back(v[3 * buckets + k] * 1e-6);
  const double bf16_per = v.back() * 1e-6;

  // The link: whole[b] = latency + bytes[b] * per_byte, fitted by least squares.
  const double mean_bytes = std::accumulate(bytes.begin(), bytes.end(), 0.0) / static_cast<double>(buckets);
  const double mean_ms = std::accumulate(whole.begin(), whole.end(), 0.0) / static_cast<double>(buckets);
  double cov = 0, var = 0, xy = 0, xx = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    cov += (bytes[b] - mean_bytes) * (whole[b] - mean_ms);
    var += (bytes[b] - mean_bytes) * (bytes[b] - mean_bytes);
    xy += bytes[b] * whole[b];
    xx += bytes[b] * bytes[b];
  }
  double per_byte = var > 0 ? cov / var : 0, latency = mean_ms - per_byte * mean_bytes;
  if (per_byte <= 0 || latency < 0) {  // too few or too noisy points for two parameters
    latency = 0;
    per_byte = xx > 0 ? xy / xx : 0;
  }

  // Each bucket's options, least compression first: their collective's time on the fitted link,
  // and their CPU time, the bytes' share of the measured one plus the local work.
  std::vector<std::vector<GradCompression>> hows(buckets);
  std::vector<std::vector<TravelCost>> options(buckets);
  for (std::size_t b = 0; b < buckets; ++b) {
    GradCompression bf16;
    bf16.kind = GradCompression::Kind::bf16;
    const double numel = static_cast<double>(buckets_[b]->numel());
    hows[b] = {GradCompression(), bf16};
    options[b] = {{whole[b], whole_cpu[b]},
                  {latency + per_byte * bytes[b] / 2 + numel * bf16_per, whole_cpu[b] / 2 + numel * bf16_per}};
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      const auto [sent, factored] = powersgd_sizes(buckets_[b]->entries(), buckets_[b]->numel(), ranks[k]);
      if (factored == 0 || 2 * sent > buckets_[b]->numel()) continue;  // no better than bf16
      GradCompression powersgd;
      powersgd.kind = GradCompression::Kind::powersgd;
      powersgd.rank = static_cast<int>(ranks[k]);
      powersgd.warmup_steps = how_.warmup_steps;
      const double share = static_cast<double>(sent) / numel, work = static_cast<double>(factored) * powersgd_per[k];
      hows[b].push_back(powersgd);
      options[b].push_back({2 * latency + per_byte * bytes[b] * share + work, whole_cpu[b] * share + work});
    }
  }
  // The slack: 2% of backward (the first bucket's window), spent on compressing less.
  const std::vector<std::size_t> pick = least_compression(
      window, options, 0.01 * std::accumulate(whole.begin(), whole.end(), 0.0), 0.02 * *std::max_element(window.begin(), window.end()));
  std::vector<GradCompression> choices;
  std::vector<TravelCost> none, chosen;
  for (std::size_t b = 0; b < buckets; ++b) {
    choices.push_back(hows[b][pick[b]]);
    none.push_back(options[b][0]);
    chosen.push_back(options[b][pick[b]]);
  }
  adopt(choices);

  char head[200];
  std::snprintf(head, sizeof head, "auto (%zu steps measured, the ranks' mean): link %.3f ms + %.3f ms/MB;", kMeasuredRounds,
                latency, per_byte * 1e6);
  std::string text = head;
  for (std::size_t b = 0; b < buckets; ++b) {
    char line[200];
    std::snprintf(line, sizeof line, " bucket %zu (%.2f MiB, window %.1f ms, whole %.1f ms, CPU %.1f ms): %s;", b,
                  bytes[b] / (1 << 20), window[b], whole[b], whole_cpu[b], choices[b].str().c_str());
    text += line;
  }
  char tail[160];
  std::snprintf(tail, sizeof tail, " past backward plus CPU predicted %.1f -> %.1f ms", step_cost_ms(window, none),
                step_cost_ms(window, chosen));
  text += tail;
  std::lock_guard<std::mutex> lock(choice_mutex_);
  choice_ = text;
}

}  // namespace troupe::actors
