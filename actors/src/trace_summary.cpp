// Reading a Chrome trace written by the Tracer back into per-actor, per-step and collective
// figures (trace_summary.hpp); trace_report.cpp prints them.
#include "troupe/actors/trace_summary.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "troupe/actors/tracer.hpp"
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

// What a trace holds: track names, handler and kernel slices, and the two ends of each message.
struct Parsed {
  std::map<std::int64_t, std::string> names;
  std::vector<Slice> slices;
  std::map<std::uint64_t, std::pair<double, std::int64_t>> flow_start;  // id -> (ts, tid)
  std::map<std::int64_t, int> sent;
  std::vector<std::pair<std::uint64_t, double>> flow_end;  // (id, ts)
  std::vector<std::int64_t> flow_end_tid;
  std::string name(std::int64_t tid) const {
    auto it = names.find(tid);
    return it != names.end() ? it->second : "actor " + std::to_string(tid);
  }
  bool is_communicator(std::int64_t tid) const {
    auto it = names.find(tid);
    return it != names.end() && it->second.rfind("communicator", 0) == 0;
  }
};

// An event's integer field `key` (0 when absent). Anything else there is refused: a float such as
// 1e300 has no integer to convert to.
template <class T>
T integer_field(const nlohmann::json& e, const char* key, const std::string& source) {
  if (!e.contains(key)) return 0;
  TROUPE_CHECK(e[key].is_number_integer(), io, source, ": an event's \"", key, "\" is not an integer");
  return e[key].get<T>();
}

Parsed parse(const std::string& json, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, source, ": not a JSON trace (", printable(e.what()), ")");
  }
  const nlohmann::json& events = doc.is_object() && doc.contains("traceEvents") ? doc["traceEvents"] : doc;
  TROUPE_CHECK(events.is_array(), io, source, ": expected a Chrome trace (an array of events or {\"traceEvents\": [...]})");
  Parsed p;
  try {  // a field of the wrong type (an event that is not an object, a string "ts") throws
    for (const auto& e : events) {
      const std::string ph = e.value("ph", "");
      const auto tid = integer_field<std::int64_t>(e, "tid", source);
      if (ph == "M" && e.value("name", "") == "thread_name") p.names[tid] = e.at("args").value("name", "");
      else if (ph == "X") {
        Slice s;
        s.tid = tid;
        s.ts = e.value("ts", 0.0);
        s.dur = e.value("dur", 0.0);
        s.name = e.value("name", "");
        if (e.contains("args")) s.step = integer_field<std::uint64_t>(e["args"], "step", source);
        p.slices.push_back(s);
      } else if (ph == "s") {
        p.flow_start[integer_field<std::uint64_t>(e, "id", source)] = {e.value("ts", 0.0), tid};
        ++p.sent[tid];
      } else if (ph == "f") {
        p.flow_end.emplace_back(integer_field<std::uint64_t>(e, "id", source), e.value("ts", 0.0));
        p.flow_end_tid.push_back(tid);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, source, ": an event is not as the tracer writes it (", printable(e.what()), ")");
  }
  return p;
}

// Busy, compute and idle time per actor, busiest first, with its handler runs from `t0` on.
// Handler slices count as busy; kernel "compute" slices nest inside them and count separately.
std::vector<ActorSummary> summarize_actors(const Parsed& p, double t0, double span_us) {
  std::map<std::int64_t, ActorSummary> per_actor;
  for (const Slice& s : p.slices) {
    ActorSummary& a = per_actor[s.tid];
    if (s.name == "compute") a.compute_us += s.dur;
    else {
      a.busy_us += s.dur;
      ++a.handled;
      a.runs.push_back({s.ts - t0, s.dur});
    }
  }
  std::vector<ActorSummary> out;
  for (auto& [tid, a] : per_actor) {
    a.name = p.name(tid);
    a.idle_us = std::max(0.0, span_us - a.busy_us);
    auto sent = p.sent.find(tid);
    a.sent = sent == p.sent.end() ? 0 : sent->second;
    std::sort(a.runs.begin(), a.runs.end(), [](const HandlerRun& x, const HandlerRun& y) { return x.start_us < y.start_us; });
    out.push_back(a);
  }
  std::sort(out.begin(), out.end(), [](const ActorSummary& a, const ActorSummary& b) { return a.busy_us > b.busy_us; });
  return out;
}

// Links each handler slice to the one whose message started it (the flow end sits at its start);
// returns the send-to-handler latency summed per step.
std::map<std::uint64_t, double> link_causes(Parsed& p) {
  std::vector<Slice>& slices = p.slices;
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
  for (std::size_t k = 0; k < p.flow_end.size(); ++k) {
    const auto [id, ts] = p.flow_end[k];
    auto it = slice_at.find({p.flow_end_tid[k], ts});
    auto st = p.flow_start.find(id);
    if (it == slice_at.end() || st == p.flow_start.end()) continue;
    Slice& target = slices[static_cast<std::size_t>(it->second)];
    target.cause = enclosing(st->second.second, st->second.first);
    messaging[target.step] += ts - st->second.first;
  }
  return messaging;
}

// The longest collectives: slices on "communicator ..." tracks, at most 5.
std::vector<CollectiveSummary> hottest_collectives(const Parsed& p) {
  std::vector<CollectiveSummary> out;
  for (const Slice& sl : p.slices)
    if (sl.name != "compute" && p.is_communicator(sl.tid)) out.push_back({p.name(sl.tid), sl.name, sl.step, sl.dur});
  std::sort(out.begin(), out.end(), [](const CollectiveSummary& x, const CollectiveSummary& y) { return x.us > y.us; });
  if (out.size() > 5) out.resize(5);
  return out;
}

// Communication of a step: slices on communicator tracks; hidden = their overlap with the union of
// the step's compute intervals on the other tracks.
void add_communication(const Parsed& p, const std::vector<int>& ids, StepSummary& s) {
  std::vector<std::pair<double, double>> compute;
  for (int i : ids) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    if (sl.name == "compute") compute.emplace_back(sl.ts, sl.ts + sl.dur);
  }
  std::sort(compute.begin(), compute.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& iv : compute) {
    if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
    else merged.push_back(iv);
  }
  for (int i : ids) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    if (sl.name == "compute" || !p.is_communicator(sl.tid)) continue;
    s.communication_us += sl.dur;
    for (const auto& [x, y] : merged) s.hidden_us += std::max(0.0, std::min(y, sl.ts + sl.dur) - std::max(x, sl.ts));
  }
}

// The fractions of [a, b] during which exactly 0, 1, 2, ... of the slices `ids` named "compute" ran.
std::vector<double> kernels_at_once(const Parsed& p, const std::vector<int>& ids, double a, double b) {
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
  for (int i : ids) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    if (sl.name != "compute") continue;
    edges.emplace_back(std::max(a, sl.ts), 1);
    edges.emplace_back(std::min(b, sl.ts + sl.dur), -1);
  }
  std::sort(edges.begin(), edges.end());
  std::vector<double> time;
  int running = 0;
  double at = a;
  for (const auto& [t, d] : edges) {
    if (time.size() <= static_cast<std::size_t>(running)) time.resize(static_cast<std::size_t>(running) + 1, 0.0);
    time[static_cast<std::size_t>(running)] += t - at;
    at = t;
    running += d;
  }
  if (time.empty()) time.push_back(0.0);
  time[0] += b - at;
  for (double& t : time) t = b > a ? t / (b - a) : 0.0;
  return time;
}

// One step: its wall and compute time, communication, and the critical path, walked back from the
// slice that ended the step along the messages that caused each run (its runs timed from `t0`).
// The pool helpers' slices (`helpers`, of no step) count where they overlap the step's wall.
StepSummary summarize_step(const Parsed& p, std::uint64_t step, const std::vector<int>& ids,
                           const std::vector<int>& helpers, double messaging_us, double t0) {
  StepSummary s;
  s.step = step;
  double a = 1e300, b = -1e300;
  int last = -1;
  for (int i : ids) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    a = std::min(a, sl.ts);
    if (sl.ts + sl.dur > b && sl.name != "compute") {
      b = sl.ts + sl.dur;
      last = i;
    }
    if (sl.name == "compute") s.compute_us += sl.dur;
  }
  std::vector<int> computing = ids;
  for (int i : helpers) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    if (sl.ts >= b || sl.ts + sl.dur <= a) continue;
    computing.push_back(i);
    s.compute_us += std::min(b, sl.ts + sl.dur) - std::max(a, sl.ts);
  }
  s.wall_us = b - a;
  s.at_once = kernels_at_once(p, computing, a, b);
  s.messaging_us = messaging_us;
  add_communication(p, ids, s);
  for (int i = last, guard = 0; i >= 0 && guard < 100000; i = p.slices[static_cast<std::size_t>(i)].cause, ++guard) {
    const Slice& sl = p.slices[static_cast<std::size_t>(i)];
    s.critical_path.push_back(p.names.count(sl.tid) ? p.names.at(sl.tid) : std::to_string(sl.tid));
    s.critical_runs.push_back({sl.ts - t0, sl.dur});
    s.critical_path_us += sl.dur;
  }
  std::reverse(s.critical_path.begin(), s.critical_path.end());
  std::reverse(s.critical_runs.begin(), s.critical_runs.end());
  return s;
}

}  // namespace

TraceSummary summarize_trace(const std::string& json, const std::string& source) {
  Parsed p = parse(json, source);
  TraceSummary out;
  out.messages = static_cast<int>(p.flow_start.size());
  double t0 = 1e300, t1 = -1e300;
  for (const Slice& s : p.slices) {
    t0 = std::min(t0, s.ts);
    t1 = std::max(t1, s.ts + s.dur);
  }
  out.span_us = p.slices.empty() ? 0 : t1 - t0;
  out.actors = summarize_actors(p, t0, out.span_us);
  std::map<std::uint64_t, double> messaging = link_causes(p);
  out.hottest_collectives = hottest_collectives(p);
  std::map<std::uint64_t, std::vector<int>> by_step;
  std::vector<int> helpers;  // the pool helpers' slices, of no one step
  for (std::size_t i = 0; i < p.slices.size(); ++i) {
    if (p.slices[i].step == kAnyStep) helpers.push_back(static_cast<int>(i));
    else if (p.slices[i].step > 0) by_step[p.slices[i].step].push_back(static_cast<int>(i));
  }
  for (const auto& [step, ids] : by_step)
    out.steps.push_back(summarize_step(p, step, ids, helpers, messaging[step], t0));
  double idle = 0, wall = 0;
  for (std::size_t k = out.steps.size() > 1 ? 1 : 0; k < out.steps.size(); ++k) {
    const StepSummary& st = out.steps[k];
    if (st.at_once.empty()) continue;
    idle += st.at_once[0] * st.wall_us;
    wall += st.wall_us;
  }
  out.idle_fraction = wall > 0 ? idle / wall : 0;
  return out;
}

}  // namespace troupe::actors
