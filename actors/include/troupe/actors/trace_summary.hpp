#pragma once
// Reading a Chrome trace written by the Tracer back: per-actor busy and idle time, message counts,
// the critical path of each step, and compute versus messaging time. What `troupe-trace summary`
// prints, and what troupe-report draws (each actor's handler runs on a timeline).

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::actors {

/// One handler run: when it began (microseconds after the trace's first slice) and how long it took.
struct HandlerRun {
  double start_us = 0, us = 0;
};

/// What one actor did over the whole trace.
struct ActorSummary {
  std::string name;
  double busy_us = 0;     // in handlers
  double compute_us = 0;  // in kernels (part of busy)
  double idle_us = 0;     // trace span minus busy
  int handled = 0;        // handler runs
  int sent = 0;           // messages sent
  std::vector<HandlerRun> runs;  // its handler runs, by start
};

/// One step: its wall time and the chain of handler runs that decided when it ended.
struct StepSummary {
  std::uint64_t step = 0;
  double wall_us = 0;
  double compute_us = 0;    // kernel time summed over all actors and the kernels' pool helpers
  double messaging_us = 0;  // send-to-handler latency summed over the step's messages
  std::vector<std::string> critical_path;  // actor names, first to last
  std::vector<HandlerRun> critical_runs;   // the handler run of each critical_path entry
  double critical_path_us = 0;             // handler time along it
  double communication_us = 0;  // collectives on communicator tracks
  double hidden_us = 0;         // the part of it that ran while some actor computed
  /// at_once[k]: the fraction of the wall during which exactly k threads computed kernels (k = 0,
  /// 1, ...): scheduler threads in kernels and the pool helpers joining them, so how busy the cores were.
  std::vector<double> at_once;
};

/// One collective run on a communicator track.
struct CollectiveSummary {
  std::string track, name;
  std::uint64_t step = 0;
  double us = 0;
};

/// The whole summary.
struct TraceSummary {
  double span_us = 0;
  int messages = 0;
  std::vector<ActorSummary> actors;  // busiest first
  std::vector<StepSummary> steps;
  std::vector<CollectiveSummary> hottest_collectives;  // longest first, at most 5
  /// The part of the steps' wall (after the first, which plans; all when there is one) with no
  /// kernel running: a pipeline stage's bubble, when the trace is one stage's.
  double idle_fraction = 0;
};

/// Parses `json` (Chrome trace format as written by Tracer); throws troupe::Error naming `source` if malformed.
TraceSummary summarize_trace(const std::string& json, const std::string& source);
/// A table for terminals.
std::string format_summary(const TraceSummary& s);
/// The summary as JSON.
std::string summary_json(const TraceSummary& s);

}  // namespace troupe::actors
