#include "troupe/actors/tracer.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "troupe/kernels/error.hpp"
#include "troupe/kernels/threading.hpp"

namespace troupe::actors {

namespace {
// One thread's events. Its mutex is taken by that thread on every record and by readers rarely,
// so it is never contended on the hot path.
struct Buffer {
  std::mutex mutex;
  std::vector<TraceEvent> events;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<Buffer>> buffers;
  std::map<std::uint32_t, std::string> names;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
};
Registry& registry() {
  static Registry r;
  return r;
}

Buffer& this_thread_buffer() {
  thread_local std::shared_ptr<Buffer> buffer = [] {
    auto b = std::make_shared<Buffer>();
    b->events.reserve(4096);
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().buffers.push_back(b);
    return b;
  }();
  return *buffer;
}

// The pool's observer: a helper's run of a kernel call's tiles becomes a compute slice of its own
// track, so the trace shows every core a kernel keeps busy, not only its caller's.
void observe_pool(bool starts) {
  thread_local std::uint64_t since = 0;
  thread_local std::uint32_t track = 0;
  Tracer& t = Tracer::instance();
  if (!t.enabled()) {
    since = 0;
    return;
  }
  if (starts) {
    since = t.now_ns();
    return;
  }
  if (since == 0) return;  // tracing began while the helper worked
  if (track == 0) track = t.register_actor("pool helper");
  TraceEvent e;
  e.actor = track;
  e.kind = "compute";
  e.step = kAnyStep;
  e.ts_ns = since;
  e.dur_ns = t.now_ns() - since;
  t.record(e);
  since = 0;
}
}  // namespace

Tracer::Tracer() {
  registry();
  set_pool_observer(&observe_pool);
}

Tracer& Tracer::instance() {
  static Tracer tracer;
  return tracer;
}

std::uint64_t Tracer::now_ns() const {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - registry().origin)
          .count());
}

void Tracer::record(const TraceEvent& e) {
  Buffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.events.push_back(e);
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  for (auto& b : registry().buffers) {
    std::lock_guard<std::mutex> l(b->mutex);
    b->events.clear();
  }
}

std::vector<TraceEvent> Tracer::events() const {
  std::vector<TraceEvent> all;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (auto& b : registry().buffers) {
      std::lock_guard<std::mutex> l(b->mutex);
      all.insert(all.end(), b->events.begin(), b->events.end());
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.ts_ns < b.ts_ns; });
  return all;
}

std::uint32_t Tracer::register_actor(const std::string& name) {
  const std::uint32_t id = next_actor_.fetch_add(1) + 1;
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().names[id] = name;
  return id;
}

std::string Tracer::actor_name(std::uint32_t id) const {
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto it = registry().names.find(id);
  return it == registry().names.end() ? "actor " + std::to_string(id) : it->second;
}

std::string Tracer::chrome_json() const {
  const std::vector<TraceEvent> all = events();
  nlohmann::json out = nlohmann::json::array();
  std::map<std::uint32_t, bool> tracks;
  // Chrome's ts is in microseconds (fractions allowed).
  auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  // A flow start must lie inside a slice of its track: sends happen inside handler runs, except those
  // from outside any actor (the API thread), which get a zero-length slice of their own.
  for (const TraceEvent& e : all) {
    tracks[e.actor] = true;
    nlohmann::json args = {{"step", e.step}, {"bytes", e.bytes}};
    if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
    if (e.type == TraceEvent::Type::handle) {
      out.push_back({{"ph", "X"}, {"name", e.kind}, {"cat", "handler"}, {"pid", 1}, {"tid", e.actor},
                     {"ts", us(e.ts_ns)}, {"dur", us(e.dur_ns)}, {"args", args}});
      if (e.flow)
        out.push_back({{"ph", "f"}, {"bp", "e"}, {"name", e.kind}, {"cat", "message"}, {"id", e.flow}, {"pid", 1},
                       {"tid", e.actor}, {"ts", us(e.ts_ns)}});
    } else {
      args["to"] = actor_name(e.peer);
      if (e.kind == std::string("run"))  // sent by the caller's thread, outside any handler: give it a slice
        out.push_back({{"ph", "X"}, {"name", "run"}, {"cat", "caller"}, {"pid", 1}, {"tid", e.actor},
                       {"ts", us(e.ts_ns)}, {"dur", 0}, {"args", {{"step", 0}}}});
      out.push_back({{"ph", "s"}, {"name", e.kind}, {"cat", "message"}, {"id", e.flow}, {"pid", 1},
                     {"tid", e.actor}, {"ts", us(e.ts_ns)}, {"args", args}});
    }
  }
  for (const auto& [id, _] : tracks)
    out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", id}, {"args", {{"name", actor_name(id)}}}});
  out.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", "troupe"}}}});
  return nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ns"}}.dump();
}

void Tracer::write_chrome_json(const std::string& path) const {
  std::ofstream f(path);
  TROUPE_CHECK(f.good(), io, "trace: cannot write ", path);
  f << chrome_json();
  TROUPE_CHECK(f.good(), io, "trace: writing ", path, " failed");
}

}  // namespace troupe::actors
