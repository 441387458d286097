#pragma once
// The register protocol (OneFlow's regst; docs/RUNTIME.md). Every producer owns a fixed number of output
// registers. It fires for its next micro-batch when every input is readable and a register is free:
// it acts, releases the input registers it read, puts its outputs into a free register and tells
// each consumer `ready`. Each consumer drops its handle on the values and then sends `release`; the
// last release frees the register. The values live only in the consumers' hands, so they die in
// the last reader's thread as soon as it has read them, before anything it sends (memory planning,
// step_memory.hpp, relies on that). The register count is the back-pressure (1 = lock-step, 2 =
// double buffering), since CAF mailboxes are unbounded. This file is the whole rule, without CAF
// (node.cpp sends the messages), so that tests/actors/test_registers.cpp checks it alone.

#include <deque>
#include <memory>
#include <vector>

#include "step_context.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/stream.hpp"

namespace troupe::actors {

/// The outputs of one firing, shared by every consumer that reads them.
using Values = std::shared_ptr<const std::vector<Tensor>>;

/// `ready`: register `reg` of actor `producer` holds `values` for micro-batch `mb` of ctx's step.
struct Ready {
  StepContextPtr ctx;
  int producer = 0, mb = 0, reg = 0;
  Values values;
  Event written;  // a producer on a stream: complete once the values are written (else complete already)
};
using ReadyPtr = std::shared_ptr<const Ready>;

/// A producer's output registers, each read by all of its `readers` consumers.
class OutRegisters {
 public:
  OutRegisters(int count, int readers) : pending_(static_cast<std::size_t>(count), 0), readers_(readers) {}
  /// True when the producer may fire: a register is free, or nobody reads what it makes.
  bool writable() const { return readers_ == 0 || free_slot() >= 0; }
  /// Takes a free register for a firing's outputs (writable() must hold) and returns its index.
  int write() {
    const int r = free_slot();
    TROUPE_CHECK(r >= 0, runtime, "register protocol: a producer fired without a free register");
    pending_[static_cast<std::size_t>(r)] = readers_;
    return r;
  }
  /// One consumer is done with register `reg`; the last one frees it.
  void release(int reg) {
    int& pending = pending_.at(static_cast<std::size_t>(reg));
    if (pending > 0) --pending;
  }
  /// Frees every register (a new step begins).
  void clear() { pending_.assign(pending_.size(), 0); }

 private:
  int free_slot() const {
    for (std::size_t r = 0; r < pending_.size(); ++r)
      if (pending_[r] == 0) return static_cast<int>(r);
    return -1;
  }
  std::vector<int> pending_;  // per register: consumers that have not released it; 0 = free
  int readers_;
};

/// One register a consumer read and must give back: `release` goes to `producer`.
struct Taken {
  int producer = 0, reg = 0, mb = 0;
};

/// A consumer's input side: per producer, the registers announced ready, oldest first.
class InRegisters {
 public:
  explicit InRegisters(std::vector<int> producers) : producers_(std::move(producers)), queues_(producers_.size()) {}
  /// Queues a `ready` from one of the producers.
  void push(ReadyPtr r) {
    for (std::size_t p = 0; p < producers_.size(); ++p)
      if (producers_[p] == r->producer) return queues_[p].push_back(std::move(r));
    fail(ErrorKind::runtime, "register protocol: a ready from actor ", r->producer, ", which is not a producer");
  }
  /// True when every producer's oldest register holds micro-batch `mb`.
  bool readable(int mb) const {
    for (const auto& q : queues_)
      if (q.empty() || q.front()->mb != mb) return false;
    return true;
  }
  /// Output `output` of `producer` in its oldest register (readable() must hold).
  const Tensor& value(int producer, int output) const {
    for (std::size_t p = 0; p < producers_.size(); ++p)
      if (producers_[p] == producer) return queues_[p].front()->values->at(static_cast<std::size_t>(output));
    fail(ErrorKind::runtime, "register protocol: no input register from actor ", producer);
  }
  /// Calls `f(producer, written)` for the oldest register of every producer (readable() must hold).
  template <class F>
  void for_each_oldest(F&& f) const {
    for (std::size_t p = 0; p < producers_.size(); ++p) f(producers_[p], queues_[p].front()->written);
  }
  /// Takes the oldest register of every producer, in producer order, dropping its values before
  /// handing it to `release` (a callback rather than a list: this runs once per firing, and a
  /// list would allocate).
  template <class Release>
  void take(Release&& release) {
    for (std::size_t p = 0; p < producers_.size(); ++p) {
      const Taken t{producers_[p], queues_[p].front()->reg, queues_[p].front()->mb};
      queues_[p].pop_front();
      release(t);
    }
  }
  /// Drops every queued register (a new step begins).
  void clear() {
    for (auto& q : queues_) q.clear();
  }

 private:
  std::vector<int> producers_;
  std::vector<std::deque<ReadyPtr>> queues_;
};

/// The firing rule (OneFlow's ActUntilFail): while micro-batches remain, the inputs hold the next
/// one, a register is free and `may_act(mb)` (the memory plan's order, step_memory.hpp), `act(mb)`;
/// it returns false when it failed, which stops the loop. True when this call finished the step's
/// last micro-batch.
template <class MayAct, class Act>
bool act_while_ready(int& next_mb, int count, const InRegisters& in, const OutRegisters& out, MayAct&& may_act,
                     Act&& act) {
  while (next_mb < count && in.readable(next_mb) && out.writable() && may_act(next_mb)) {
    if (!act(next_mb)) return false;
    if (++next_mb == count) return true;
  }
  return false;
}

}  // namespace troupe::actors
