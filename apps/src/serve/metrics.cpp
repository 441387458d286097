// Prometheus text rendering of troupe-serve's counters and histograms.
#include "troupe/apps/serve/metrics.hpp"

#include <cstdio>

namespace troupe::apps::serve {

namespace {

// Latency buckets from 1 ms to 30 s, and batch-size buckets from 1 to 64.
const std::vector<double> kSeconds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
const std::vector<double> kBatch{1, 2, 4, 8, 16, 32, 64};

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);  // 0.005, not 0.0050000000000000001
  return buf;
}

}  // namespace

void Metrics::add(Histogram& h, const std::vector<double>& bounds, double value) {
  if (h.counts.empty()) h.counts.assign(bounds.size() + 1, 0);
  std::size_t i = 0;
  while (i < bounds.size() && value > bounds[i]) ++i;
  ++h.counts[i];
  h.sum += value;
  ++h.count;
}

void Metrics::observe_request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  add(latency_[route], kSeconds, seconds);
}

void Metrics::observe_batch(const std::string& route, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(batches_[route], kBatch, size);
}

void Metrics::set_queue_depth(std::int64_t depth) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_depth_ = depth;
}

void Metrics::set_running(std::int64_t running) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = running;
}

void Metrics::observe_cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cancelled_;
}

void Metrics::observe_token(bool first, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(first ? first_token_ : inter_token_, kSeconds, seconds);
}

void Metrics::observe_time_per_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(per_token_, kSeconds, seconds);
}

std::uint64_t Metrics::requests_with_status(int status) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t n = 0;
  for (const auto& [key, count] : requests_)
    if (key.second == status) n += count;
  return n;
}

void Metrics::render(std::string& out, const std::string& name, const std::string& labels,
                     const std::vector<double>& bounds, const Histogram& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < bounds.size() ? number(bounds[i]) : "+Inf";
    out += name + "_bucket{" + labels + (labels.empty() ? "" : ",") + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  const std::string braced = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braced + " " + number(h.sum) + "\n";
  out += name + "_count" + braced + " " + std::to_string(h.count) + "\n";
}

std::string Metrics::prometheus() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP troupe_requests_total Requests answered, by route and HTTP status.\n";
  out += "# TYPE troupe_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out += "troupe_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  out += "# HELP troupe_request_duration_seconds Time from a request read to its answer written.\n";
  out += "# TYPE troupe_request_duration_seconds histogram\n";
  for (const auto& [route, h] : latency_) render(out, "troupe_request_duration_seconds", "route=\"" + route + "\"", kSeconds, h);
  out += "# HELP troupe_batch_size Requests run together in one inference batch.\n";
  out += "# TYPE troupe_batch_size histogram\n";
  for (const auto& [route, h] : batches_) render(out, "troupe_batch_size", "route=\"" + route + "\"", kBatch, h);
  out += "# HELP troupe_queue_depth Requests waiting for inference.\n";
  out += "# TYPE troupe_queue_depth gauge\n";
  out += "troupe_queue_depth " + std::to_string(queue_depth_) + "\n";
  const struct {
    const char* name;
    const char* help;
    const Histogram& h;
  } tokens[] = {{"troupe_time_to_first_token_seconds", "From a generate request's arrival to its first token.", first_token_},
                {"troupe_inter_token_latency_seconds", "Between two tokens of one request.", inter_token_},
                {"troupe_time_per_output_token_seconds", "A finished request's time per token after its first.", per_token_}};
  for (const auto& t : tokens) {
    out += std::string("# HELP ") + t.name + " " + t.help + "\n";
    out += std::string("# TYPE ") + t.name + " histogram\n";
    if (t.h.count > 0) render(out, t.name, "", kSeconds, t.h);
  }
  out += "# HELP troupe_requests_running Requests being decoded.\n";
  out += "# TYPE troupe_requests_running gauge\n";
  out += "troupe_requests_running " + std::to_string(running_) + "\n";
  out += "# HELP troupe_requests_cancelled_total Requests given up because their client went away.\n";
  out += "# TYPE troupe_requests_cancelled_total counter\n";
  out += "troupe_requests_cancelled_total " + std::to_string(cancelled_) + "\n";
  return out;
}

}  // namespace troupe::apps::serve
