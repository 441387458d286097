#pragma once
// The message-flow tracer. Off by default; when on, every message an actor sends and every handler
// run is recorded into a per-thread buffer (no lock shared between threads on the hot path), and the
// whole can be exported as Chrome trace JSON: one track per actor, flow arrows for messages, which
// Perfetto and chrome://tracing open directly.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::actors {

/// One recorded event.
struct TraceEvent {
  enum class Type : std::uint8_t { send, handle };
  Type type = Type::handle;
  std::uint64_t ts_ns = 0;   // start (steady clock, since the tracer was created)
  std::uint64_t dur_ns = 0;  // handler duration; 0 for sends
  std::uint32_t actor = 0;   // the sending or handling actor's trace id
  std::uint32_t peer = 0;    // for sends: the receiving actor
  const char* kind = "";     // message kind ("ready", "release", ...), a string literal
  std::uint64_t flow = 0;    // id linking a send to the handler run it caused (0 = none)
  std::uint64_t bytes = 0;   // tensor bytes referenced by the message (handles, not copies)
  std::uint64_t step = 0;
  std::int32_t micro_batch = -1;
};

/// The step of slices that serve whichever step runs: the kernels' pool helpers, each traced as a
/// track "pool helper" of compute slices, which the summary counts in the steps they overlap.
inline constexpr std::uint64_t kAnyStep = ~std::uint64_t{0};

/// The process-wide tracer.
class Tracer {
 public:
  /// The tracer every actor records into.
  static Tracer& instance();
  /// Turns recording on or off (cheap to test: one relaxed atomic load per event).
  void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  /// True while recording.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Drops all recorded events (actor names are kept).
  void clear();
  /// All events of all threads, ordered by time.
  std::vector<TraceEvent> events() const;
  /// A fresh trace id for an actor called `name` (tracks are named by it).
  std::uint32_t register_actor(const std::string& name);
  /// The name of actor `id`.
  std::string actor_name(std::uint32_t id) const;
  /// A fresh flow id for one message.
  std::uint64_t next_flow() { return flow_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// Nanoseconds since the tracer started.
  std::uint64_t now_ns() const;
  /// Appends `e` to the calling thread's buffer.
  void record(const TraceEvent& e);
  /// The events as Chrome trace JSON (complete events per actor track, flow events for messages).
  std::string chrome_json() const;
  /// Writes chrome_json() to `path`; throws troupe::Error(io) naming the path on failure.
  void write_chrome_json(const std::string& path) const;

 private:
  Tracer();
  std::atomic<bool> enabled_{false};
  std::atomic<std::uint64_t> flow_{0};
  std::atomic<std::uint32_t> next_actor_{0};
};

}  // namespace troupe::actors
