// A trace summary as text for a terminal and as JSON for scripts (trace_summary.hpp).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "troupe/actors/trace_summary.hpp"

namespace troupe::actors {

std::string format_summary(const TraceSummary& s) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "trace span %.1f us, %d messages, %zu actors\n\n", s.span_us, s.messages,
                s.actors.size());
  out += line;
  std::snprintf(line, sizeof line, "%-32s %12s %12s %12s %8s %8s\n", "actor", "busy us", "compute us", "idle us",
                "handled", "sent");
  out += line;
  for (const ActorSummary& a : s.actors) {
    std::snprintf(line, sizeof line, "%-32.32s %12.1f %12.1f %12.1f %8d %8d\n", a.name.c_str(), a.busy_us,
                  a.compute_us, a.idle_us, a.handled, a.sent);
    out += line;
  }
  for (const StepSummary& st : s.steps) {
    std::snprintf(line, sizeof line,
                  "\nstep %llu: wall %.1f us, compute %.1f us, messaging latency %.1f us (summed over messages)\n",
                  static_cast<unsigned long long>(st.step), st.wall_us, st.compute_us, st.messaging_us);
    out += line;
    out += "  kernels at once:";
    for (std::size_t k = 0; k < st.at_once.size(); ++k) {
      std::snprintf(line, sizeof line, "%s %zu %.0f%%", k ? "," : "", k, 100.0 * st.at_once[k]);
      out += line;
    }
    out += " of the wall\n";
    if (st.communication_us > 0) {
      std::snprintf(line, sizeof line, "  communication %.1f us, of which %.1f us (%.0f%%) hidden behind compute\n",
                    st.communication_us, st.hidden_us, 100.0 * st.hidden_us / st.communication_us);
      out += line;
    }
    std::snprintf(line, sizeof line, "  critical path (%zu handler runs, %.1f us in handlers):", st.critical_path.size(),
                  st.critical_path_us);
    out += line;
    for (std::size_t i = 0; i < st.critical_path.size(); ++i) {
      if (i > 0 && st.critical_path[i] == st.critical_path[i - 1]) continue;
      out += (i ? " -> " : " ") + st.critical_path[i];
    }
    out += "\n";
  }
  std::snprintf(line, sizeof line, "\nidle (no kernel running) %.1f%% of the steps' wall%s\n", 100.0 * s.idle_fraction,
                s.steps.size() > 1 ? ", after the first" : "");
  out += line;
  if (!s.hottest_collectives.empty()) out += "\nhottest collectives:\n";
  for (const CollectiveSummary& c : s.hottest_collectives) {
    std::snprintf(line, sizeof line, "  %-28s %-12s step %llu  %.1f us\n", c.track.c_str(), c.name.c_str(),
                  static_cast<unsigned long long>(c.step), c.us);
    out += line;
  }
  return out;
}

std::string summary_json(const TraceSummary& s) {
  nlohmann::json j;
  j["span_us"] = s.span_us;
  j["messages"] = s.messages;
  j["idle_fraction"] = s.idle_fraction;
  j["actors"] = nlohmann::json::array();
  for (const ActorSummary& a : s.actors)
    j["actors"].push_back({{"name", a.name}, {"busy_us", a.busy_us}, {"compute_us", a.compute_us},
                           {"idle_us", a.idle_us}, {"handled", a.handled}, {"sent", a.sent}});
  j["steps"] = nlohmann::json::array();
  for (const StepSummary& st : s.steps)
    j["steps"].push_back({{"step", st.step}, {"wall_us", st.wall_us}, {"compute_us", st.compute_us},
                          {"messaging_us", st.messaging_us}, {"critical_path", st.critical_path},
                          {"critical_path_us", st.critical_path_us}, {"communication_us", st.communication_us},
                          {"hidden_us", st.hidden_us}, {"kernels_at_once", st.at_once}});
  j["hottest_collectives"] = nlohmann::json::array();
  for (const CollectiveSummary& c : s.hottest_collectives)
    j["hottest_collectives"].push_back({{"track", c.track}, {"name", c.name}, {"step", c.step}, {"us", c.us}});
  return j.dump(2);
}

}  // namespace troupe::actors
