#pragma once
// troupe-serve's metrics in the Prometheus text format (GET /metrics): requests by route and
// status, a latency histogram per route, the sizes of the batches inference ran, and the depth of
// the work queue. Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace troupe::apps::serve {

/// Counters and histograms of one server.
class Metrics {
 public:
  /// Counts one answered request of `route` with `status`, `seconds` from read to written.
  void observe_request(const std::string& route, int status, double seconds);
  /// Counts one batch of `size` requests run together.
  void observe_batch(const std::string& route, int size);
  /// Sets the number of requests waiting for inference.
  void set_queue_depth(std::int64_t depth);
  /// Sets the number of requests being decoded.
  void set_running(std::int64_t running);
  /// Counts one request given up because its client went away.
  void observe_cancelled();
  /// A generated token's latency: from the request's arrival for its first (time to first token),
  /// from the token before for the others (inter-token latency).
  void observe_token(bool first, double seconds);
  /// A finished request's time per output token: from its first token to its last, over the tokens after the first.
  void observe_time_per_token(double seconds);
  /// Requests answered so far with `status` (all routes).
  std::uint64_t requests_with_status(int status) const;
  /// Everything, in the Prometheus text exposition format (version 0.0.4).
  std::string prometheus() const;

 private:
  // A cumulative histogram over fixed upper bounds.
  struct Histogram {
    std::vector<std::uint64_t> counts;  // one per bound, then +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  static void add(Histogram& h, const std::vector<double>& bounds, double value);
  static void render(std::string& out, const std::string& name, const std::string& labels,
                     const std::vector<double>& bounds, const Histogram& h);

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> latency_, batches_;
  Histogram first_token_, inter_token_, per_token_;
  std::int64_t queue_depth_ = 0, running_ = 0;
  std::uint64_t cancelled_ = 0;
};

}  // namespace troupe::apps::serve
