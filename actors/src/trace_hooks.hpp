#pragma once
// How actors record into the tracer: one helper per send and one scope per handler run. Both cost
// a relaxed atomic load when tracing is off.

#include "troupe/actors/tracer.hpp"

namespace troupe::actors {

/// Records a send of `kind` from trace id `from` to `to`; returns the flow id (0 when off).
inline std::uint64_t trace_send(std::uint32_t from, std::uint32_t to, const char* kind, std::uint64_t step, int mb,
                                std::uint64_t bytes = 0) {
  Tracer& t = Tracer::instance();
  if (!t.enabled()) return 0;
  TraceEvent e;
  e.type = TraceEvent::Type::send;
  e.ts_ns = t.now_ns();
  e.actor = from;
  e.peer = to;
  e.kind = kind;
  e.flow = t.next_flow();
  e.bytes = bytes;
  e.step = step;
  e.micro_batch = mb;
  t.record(e);
  return e.flow;
}

/// Records one handler run of actor `actor` from construction to destruction.
class HandlerTrace {
 public:
  HandlerTrace(std::uint32_t actor, const char* kind, std::uint64_t flow, std::uint64_t step, int mb,
               std::uint64_t bytes = 0)
      : on_(Tracer::instance().enabled()) {
    if (!on_) return;
    e_.actor = actor;
    e_.kind = kind;
    e_.flow = flow;
    e_.step = step;
    e_.micro_batch = mb;
    e_.bytes = bytes;
    e_.ts_ns = Tracer::instance().now_ns();
  }
  ~HandlerTrace() {
    if (!on_) return;
    e_.dur_ns = Tracer::instance().now_ns() - e_.ts_ns;
    Tracer::instance().record(e_);
  }
  HandlerTrace(const HandlerTrace&) = delete;
  HandlerTrace& operator=(const HandlerTrace&) = delete;

 private:
  bool on_;
  TraceEvent e_;
};

}  // namespace troupe::actors
