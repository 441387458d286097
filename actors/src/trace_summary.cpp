#include "troupe/actors/trace_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

namespace {
struct Slice {
  std::int64_t tid = 0;
  double ts = 0, dur = 0;
  std::string name;
  std::uint64_t step = 0;
  int cause = -1;  // index of the slice whose message started this one
};
}  // namespace

TraceSummary summarize_trace(const std::string& json, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, source, ": not a JSON trace (", e.what(), ")");
  }
  const nlohmann::json& events = doc.is_object() && doc.contains("traceEvents") ? doc["traceEvents"] : doc;
  TROUPE_CHECK(events.is_array(), io, source, ": expected a Chrome trace (an array of events or {\"traceEvents\": [...]})");

  std::map<std::int64_t, std::string> names;
  std::vector<Slice> slices;
  std::map<std::uint64_t, std::pair<double, std::int64_t>> flow_start;  // id -> (ts, tid)
  std::map<std::int64_t, int> sent;
  std::vector<std::pair<std::uint64_t, double>> flow_end;  // (id, ts)
  std::vector<std::int64_t> flow_end_tid;
  for (const auto& e : events) {
    const std::string ph = e.value("ph", "");
    const std::int64_t tid = e.value("tid", std::int64_t{0});
    if (ph == "M" && e.value("name", "") == "thread_name") names[tid] = e["args"].value("name", "");
    else if (ph == "X") {
      Slice s;
      s.tid = tid;
      s.ts = e.value("ts", 0.0);
      s.dur = e.value("dur", 0.0);
      s.name = e.value("name", "");
      if (e.contains("args")) s.step = e["args"].value("step", std::uint64_t{0});
      slices.push_back(s);
    } else if (ph == "s") {
      flow_start[e.value("id", std::uint64_t{0})] = {e.value("ts", 0.0), tid};
      ++sent[tid];
    } else if (ph == "f") {
      flow_end.emplace_back(e.value("id", std::uint64_t{0}), e.value("ts", 0.0));
      flow_end_tid.push_back(tid);
    }
  }

  TraceSummary out;
  out.messages = static_cast<int>(flow_start.size());
  double t0 = 1e300, t1 = -1e300;
  for (const Slice& s : slices) {
    t0 = std::min(t0, s.ts);
    t1 = std::max(t1, s.ts + s.dur);
  }
  out.span_us = slices.empty() ? 0 : t1 - t0;

  // Handler slices (kernel "compute" slices nest inside them and count separately).
  std::map<std::int64_t, ActorSummary> per_actor;
  for (const Slice& s : slices) {
    ActorSummary& a = per_actor[s.tid];
    if (s.name == "compute") a.compute_us += s.dur;
    else {
      a.busy_us += s.dur;
      ++a.handled;
    }
  }
  for (auto& [tid, a] : per_actor) {
    a.name = names.count(tid) ? names[tid] : "actor " + std::to_string(tid);
    a.idle_us = std::max(0.0, out.span_us - a.busy_us);
    a.sent = sent[tid];
  }
  for (auto& [tid, a] : per_actor) out.actors.push_back(a);
  std::sort(out.actors.begin(), out.actors.end(),
            [](const ActorSummary& a, const ActorSummary& b) { return a.busy_us > b.busy_us; });

  // Link each handler slice to the one whose message started it: the flow end sits at its start.
  std::map<std::pair<std::int64_t, double>, int> slice_at;
  for (std::size_t i = 0; i < slices.size(); ++i)
    if (slices[i].name != "compute") slice_at[{slices[i].tid, slices[i].ts}] = static_cast<int>(i);
  // Handler slices of one track never overlap (an actor runs one handler at a time), so the slice
  // enclosing a send is the last one on its track starting at or before it.
  std::map<std::int64_t, std::vector<int>> track;
  for (std::size_t i = 0; i < slices.size(); ++i)
    if (slices[i].name != "compute") track[slices[i].tid].push_back(static_cast<int>(i));
  for (auto& [tid, ids] : track)
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return slices[static_cast<std::size_t>(a)].ts < slices[static_cast<std::size_t>(b)].ts; });
  auto enclosing = [&](std::int64_t tid, double ts) {
    auto t = track.find(tid);
    if (t == track.end()) return -1;
    const auto& ids = t->second;
    auto it = std::upper_bound(ids.begin(), ids.end(), ts,
                               [&](double x, int i) { return x < slices[static_cast<std::size_t>(i)].ts; });
    if (it == ids.begin()) return -1;
    const int i = *(it - 1);
    const Slice& s = slices[static_cast<std::size_t>(i)];
    return ts <= s.ts + s.dur + 1e-3 ? i : -1;
  };
  std::map<std::uint64_t, double> messaging;  // step -> latency sum
  for (std::size_t k = 0; k < flow_end.size(); ++k) {
    const auto [id, ts] = flow_end[k];
    auto it = slice_at.find({flow_end_tid[k], ts});
    auto st = flow_start.find(id);
    if (it == slice_at.end() || st == flow_start.end()) continue;
    Slice& target = slices[static_cast<std::size_t>(it->second)];
    target.cause = enclosing(st->second.second, st->second.first);
    messaging[target.step] += ts - st->second.first;
  }

  auto is_communicator = [&](std::int64_t tid) {
    auto it = names.find(tid);
    return it != names.end() && it->second.rfind("communicator", 0) == 0;
  };
  for (const Slice& sl : slices)
    if (sl.name != "compute" && is_communicator(sl.tid)) out.hottest_collectives.push_back({names[sl.tid], sl.name, sl.step, sl.dur});
  std::sort(out.hottest_collectives.begin(), out.hottest_collectives.end(),
            [](const CollectiveSummary& x, const CollectiveSummary& y) { return x.us > y.us; });
  if (out.hottest_collectives.size() > 5) out.hottest_collectives.resize(5);

  std::map<std::uint64_t, std::vector<int>> by_step;
  for (std::size_t i = 0; i < slices.size(); ++i)
    if (slices[i].step > 0) by_step[slices[i].step].push_back(static_cast<int>(i));
  for (const auto& [step, ids] : by_step) {
    StepSummary s;
    s.step = step;
    double a = 1e300, b = -1e300;
    int last = -1;
    for (int i : ids) {
      const Slice& sl = slices[static_cast<std::size_t>(i)];
      a = std::min(a, sl.ts);
      if (sl.ts + sl.dur > b && sl.name != "compute") {
        b = sl.ts + sl.dur;
        last = i;
      }
      if (sl.name == "compute") s.compute_us += sl.dur;
    }
    s.wall_us = b - a;
    s.messaging_us = messaging[step];
    // Communication: slices on communicator tracks; hidden = their overlap with the union of the
    // step's compute intervals on the other tracks.
    std::vector<std::pair<double, double>> compute;
    for (int i : ids) {
      const Slice& sl = slices[static_cast<std::size_t>(i)];
      if (sl.name == "compute") compute.emplace_back(sl.ts, sl.ts + sl.dur);
    }
    std::sort(compute.begin(), compute.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& iv : compute) {
      if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
      else merged.push_back(iv);
    }
    for (int i : ids) {
      const Slice& sl = slices[static_cast<std::size_t>(i)];
      if (sl.name == "compute" || !is_communicator(sl.tid)) continue;
      s.communication_us += sl.dur;
      for (const auto& [x, y] : merged) s.hidden_us += std::max(0.0, std::min(y, sl.ts + sl.dur) - std::max(x, sl.ts));
    }
    // Walk back from the slice that ended the step along the messages that caused each run.
    for (int i = last, guard = 0; i >= 0 && guard < 100000; i = slices[static_cast<std::size_t>(i)].cause, ++guard) {
      const Slice& sl = slices[static_cast<std::size_t>(i)];
      s.critical_path.push_back(names.count(sl.tid) ? names[sl.tid] : std::to_string(sl.tid));
      s.critical_path_us += sl.dur;
    }
    std::reverse(s.critical_path.begin(), s.critical_path.end());
    out.steps.push_back(std::move(s));
  }
  return out;
}

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
  j["actors"] = nlohmann::json::array();
  for (const ActorSummary& a : s.actors)
    j["actors"].push_back({{"name", a.name}, {"busy_us", a.busy_us}, {"compute_us", a.compute_us},
                           {"idle_us", a.idle_us}, {"handled", a.handled}, {"sent", a.sent}});
  j["steps"] = nlohmann::json::array();
  for (const StepSummary& st : s.steps)
    j["steps"].push_back({{"step", st.step}, {"wall_us", st.wall_us}, {"compute_us", st.compute_us},
                          {"messaging_us", st.messaging_us}, {"critical_path", st.critical_path},
                          {"critical_path_us", st.critical_path_us}, {"communication_us", st.communication_us},
                          {"hidden_us", st.hidden_us}});
  j["hottest_collectives"] = nlohmann::json::array();
  for (const CollectiveSummary& c : s.hottest_collectives)
    j["hottest_collectives"].push_back({{"track", c.track}, {"name", c.name}, {"step", c.step}, {"us", c.us}});
  return j.dump(2);
}

}  // namespace troupe::actors
