#include "step_memory.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

namespace {

// The act this thread is in and the recording it belongs to, so that a recorder knows who dropped
// a block (another program's act, or none, counts as outside the step's acts).
struct CurrentAct {
  const MemoryLeaseOwner* recording = nullptr;
  int act = -1;
};
thread_local CurrentAct current_act;

constexpr int alive = -2;  // a recorded block nobody has dropped yet

// What one recorded step learned about its blocks: sizes and ticks (in the order things happened
// this time), the act that made each, the acts that read it from a register and the act that
// dropped it.
struct Recording final : MemoryLeaseOwner {
  std::mutex mutex;
  std::uint64_t tick = 0;
  bool finished = false;
  std::vector<PlannedBlock> blocks;
  std::vector<int> born, dropped;
  std::vector<std::vector<int>> readers;
  std::vector<std::vector<std::size_t>> act_blocks;  // per act: its blocks in request order
  std::vector<std::uint64_t> started, ended;         // per act: ticks when it began and when it was over

  // An act whose end was not seen (the step failed around it) counts as never over.
  explicit Recording(std::size_t acts)
      : act_blocks(acts), started(acts, 0), ended(acts, std::numeric_limits<std::uint64_t>::max()) {}

  void released(std::size_t k) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (finished) return;
    blocks[k].end = tick++;
    dropped[k] = current_act.recording == this ? current_act.act : -1;
  }
};

// A shape's plan: the arena, which block each act's k-th allocation takes, and the memory edges
// that make the recorded order's sharing hold in every run.
struct StepPlan {
  std::shared_ptr<PlannedArena> arena;
  std::vector<std::vector<std::size_t>> act_blocks;
  std::vector<int> waits;                 // per act: memory edges into it
  std::vector<std::vector<int>> signals;  // per act: the acts its memory edges lead to
};

}  // namespace

// reach_[a] has bit b when act a comes before act b. Actors are numbered in topological order,
// so every edge goes to a higher act number and one backward pass closes the relation.
ActOrder::ActOrder(const ActorGraph& plan, int micro_batches, int registers)
    : actors_(static_cast<int>(plan.actors.size())),
      acts_(static_cast<std::size_t>(actors_) * static_cast<std::size_t>(micro_batches)),
      words_((acts_ + 63) / 64),
      reach_(acts_ * words_, 0) {
  for (std::size_t a = acts_; a-- > 0;) {
    const int x = static_cast<int>(a % static_cast<std::size_t>(actors_)), mb = static_cast<int>(a / static_cast<std::size_t>(actors_));
    const ActorSpec& spec = plan.actors[static_cast<std::size_t>(x)];
    const auto follow = [&](int actor, int m) {
      if (m >= micro_batches) return;
      const std::size_t b = static_cast<std::size_t>(act(actor, m));
      TROUPE_CHECK(b > a, runtime, "memory planning: actor ", actor, " does not follow actor ", x, " in the plan's order");
      reach_[a * words_ + b / 64] |= std::uint64_t{1} << (b % 64);
      for (std::size_t w = 0; w < words_; ++w) reach_[a * words_ + w] |= reach_[b * words_ + w];
    };
    for (int c : spec.consumers) follow(c, mb);              // a consumer reads what this act made
    follow(x, mb + 1);                                         // an actor takes its micro-batches in order
    for (int p : spec.producers) follow(p, mb + registers);  // p's register of mb is free only after this read
  }
}

bool ActOrder::before(int a, int b) const {
  const auto i = static_cast<std::size_t>(a), j = static_cast<std::size_t>(b);
  return (reach_[i * words_ + j / 64] >> (j % 64)) & 1;
}

class StepArena {
 public:
  /// A step of a program of `plan` with `micro_batches`, at the input shapes `key`.
  StepArena(std::shared_ptr<const ActorGraph> plan, int micro_batches, std::vector<Shape> key)
      : plan_(std::move(plan)), actors_(static_cast<int>(plan_->actors.size())), micro_batches_(micro_batches), key_(std::move(key)) {}

  /// The number of act (actor, mb).
  int act_id(int actor, int mb) const { return ActOrder::act(actor, mb, actors_); }
  /// Actors of the program.
  int actors() const { return actors_; }
  /// The recorder when this step records, else null.
  const MemoryLeaseOwner* recording() const { return recording_.get(); }

  /// The place of act `act`'s k-th allocation, of `bytes`: recorded, planned, or (empty) the allocator.
  MemoryLease lease(int act, std::size_t k, std::size_t bytes) {
    if (recording_) {
      Recording& r = *recording_;
      std::lock_guard<std::mutex> lock(r.mutex);
      if (r.finished) return {};
      r.blocks.push_back(PlannedBlock{bytes, r.tick++, PlannedBlock::escapes});
      r.born.push_back(act);
      r.dropped.push_back(alive);
      r.readers.emplace_back();
      r.act_blocks[static_cast<std::size_t>(act)].push_back(r.blocks.size() - 1);
      return MemoryLease{nullptr, recording_, r.blocks.size() - 1};
    }
    if (!planned_) return {};
    const std::vector<std::size_t>& mine = planned_->act_blocks[static_cast<std::size_t>(act)];
    bool diverged = k >= mine.size();
    const MemoryLease lease = diverged ? MemoryLease{} : planned_->arena->lease_block(mine[k], bytes, diverged);
    if (diverged) diverged_ = true;
    return lease;
  }

  /// Act `act` begins (recording: its start tick).
  void act_begun(int act) {
    if (!recording_) return;
    std::lock_guard<std::mutex> lock(recording_->mutex);
    recording_->started[static_cast<std::size_t>(act)] = recording_->tick++;
  }

  /// Act `act` is over after `count` allocations (recording: its end tick; planned: a count
  /// other than the plan's is a divergence).
  void act_done(int act, std::size_t count) {
    if (recording_) {
      std::lock_guard<std::mutex> lock(recording_->mutex);
      recording_->ended[static_cast<std::size_t>(act)] = recording_->tick++;
    }
    if (planned_ && count != planned_->act_blocks[static_cast<std::size_t>(act)].size()) diverged_ = true;
  }

  /// Memory edges into act `act`.
  int waits(int act) const { return planned_ ? planned_->waits[static_cast<std::size_t>(act)] : 0; }

  /// The acts act `act` signals once over.
  const std::vector<int>& signals(int act) const {
    static const std::vector<int> none;
    return planned_ ? planned_->signals[static_cast<std::size_t>(act)] : none;
  }

  /// Act (actor, mb) put `values` into a register (recording: their blocks gain its consumers as
  /// readers; a sink holds what it read until its last micro-batch, so that act reads it too).
  void emitted(int actor, int mb, const std::vector<Tensor>& values) {
    if (!recording_) return;
    Recording& r = *recording_;
    for (const Tensor& t : values) {
      if (!t.defined() || t.storage()->lease().owner.get() != &r) continue;
      std::lock_guard<std::mutex> lock(r.mutex);
      std::vector<int>& readers = r.readers[t.storage()->lease().index];
      for (int c : plan_->actors[static_cast<std::size_t>(actor)].consumers) {
        readers.push_back(act_id(c, mb));
        if (plan_->actors[static_cast<std::size_t>(c)].kind == ActorSpec::Kind::sink && mb + 1 < micro_batches_)
          readers.push_back(act_id(c, micro_batches_ - 1));
      }
    }
  }

 private:
  friend class StepMemory;
  std::shared_ptr<const ActorGraph> plan_;
  int actors_, micro_batches_;
  std::vector<Shape> key_;
  std::shared_ptr<Recording> recording_;      // a recording step
  std::shared_ptr<const StepPlan> planned_;  // a planned step
  std::atomic<bool> diverged_{false};
};

ActMemory::ActMemory(StepArena* step, int actor, int mb)
    : step_(step), actor_(actor), mb_(mb), act_(step ? step->act_id(actor, mb) : -1) {
  current_act = CurrentAct{step_ ? step_->recording() : nullptr, act_};
  if (step_) step_->act_begun(act_);
}

ActMemory::ActMemory(StepArena* step, int actor, int mb, std::size_t made)
    : step_(step), actor_(actor), mb_(mb), act_(step ? step->act_id(actor, mb) : -1), next_(made) {
  current_act = CurrentAct{step_ ? step_->recording() : nullptr, act_};
}

ActMemory::~ActMemory() {
  if (step_ && !suspended_) step_->act_done(act_, next_);
  current_act = CurrentAct{};
}

std::size_t ActMemory::suspend() {
  suspended_ = true;
  return next_;
}

void ActMemory::emitted(const std::vector<Tensor>& values) {
  if (step_) step_->emitted(actor_, mb_, values);
}

MemoryLease ActMemory::lease(std::size_t bytes) { return step_ ? step_->lease(act_, next_++, bytes) : MemoryLease{}; }

namespace {

// Plans `r` in one arena. Block i may share bytes with block j when every act that touches i
// (its maker, its readers, the act that dropped it) comes before j's maker: in every run by the
// protocol's order (ActOrder), or because it was over before that act began in the recorded run.
// For the latter the plan adds a memory edge: j's maker then waits for the act's signal, so the
// recorded order's sharing holds in every run. The edges follow the recorded run's start times,
// as the protocol's do, so together they stay acyclic and the recorded run satisfies them all.
std::shared_ptr<const StepPlan> plan_recording(const Recording& r, const ActorGraph& actors, int micro_batches,
                                               int registers) {
  const ActOrder order(actors, micro_batches, registers);
  const auto done_before = [&](int a, int b) {
    return order.before(a, b) || (a != b && r.ended[static_cast<std::size_t>(a)] < r.started[static_cast<std::size_t>(b)]);
  };
  // The acts that touch block i: for a block dropped outside the acts, or alive after the step, none suffices.
  const auto touching = [&](std::size_t i, auto&& each) {
    if (!each(r.born[i]) || !each(r.dropped[i])) return false;
    return std::all_of(r.readers[i].begin(), r.readers[i].end(), [&](int a) { return each(a); });
  };
  // Within one act things happen in the same order every run: a block the act drops before it
  // asks for j (a temporary, or an input a grouped act is done with) may share with j when every
  // other act that touches it is over before this one begins.
  const auto dead_before = [&](std::size_t i, std::size_t j) {
    const int maker = r.born[j];
    if (r.dropped[i] < 0) return false;
    if (r.dropped[i] == maker)
      return r.blocks[i].end <= r.blocks[j].begin && touching(i, [&](int a) { return a == maker || done_before(a, maker); });
    return touching(i, [&](int a) { return a != maker && done_before(a, maker); });
  };
  const LifetimeOverlap overlap = [&](std::size_t i, std::size_t j) { return !dead_before(i, j) && !dead_before(j, i); };
  // One slot per result: a training loop drops a step's result before the next; a result still
  // held then is allocated afresh.
  auto planned = std::make_shared<StepPlan>();
  planned->arena = std::make_shared<PlannedArena>(ArenaLayout::build(r.blocks, 1, overlap), overlap);
  planned->act_blocks = r.act_blocks;
  // The edges: for two blocks sharing bytes, every act touching the first that the protocol does
  // not already order before the second's maker.
  const ArenaLayout& plan = planned->arena->plan();
  const std::size_t acts = r.act_blocks.size();
  std::vector<std::vector<int>> signals(acts);
  for (std::size_t i = 0; i < plan.blocks.size(); ++i) {
    if (plan.blocks[i].escaped()) continue;
    for (std::size_t j = 0; j < plan.blocks.size(); ++j) {
      if (i == j || plan.blocks[j].escaped() || r.born[i] == r.born[j]) continue;
      const bool share = plan.offset[i] < plan.offset[j] + plan.blocks[j].planned_bytes() &&
                         plan.offset[j] < plan.offset[i] + plan.blocks[i].planned_bytes();
      if (!share || !dead_before(i, j)) continue;
      const int maker = r.born[j];
      touching(i, [&](int a) {
        if (a != maker && !order.before(a, maker)) signals[static_cast<std::size_t>(a)].push_back(maker);
        return true;
      });
    }
  }
  planned->waits.assign(acts, 0);
  planned->signals.resize(acts);
  for (std::size_t a = 0; a < acts; ++a) {
    std::sort(signals[a].begin(), signals[a].end());
    signals[a].erase(std::unique(signals[a].begin(), signals[a].end()), signals[a].end());
    for (int b : signals[a]) ++planned->waits[static_cast<std::size_t>(b)];
    planned->signals[a] = std::move(signals[a]);
  }
  return planned;
}

}  // namespace

int memory_waits(const StepArena* step, int actor, int mb) { return step ? step->waits(step->act_id(actor, mb)) : 0; }

void for_each_memory_signal(const StepArena* step, int actor, int mb, const std::function<void(int, int)>& go) {
  if (!step) return;
  for (int a : step->signals(step->act_id(actor, mb))) go(a % step->actors(), a / step->actors());
}

struct StepMemory::Entry {
  std::vector<Shape> key;
  std::shared_ptr<const StepPlan> plan;  // null until recorded, and after a divergence
  graph::MemoryPlanReport report;
};

StepMemory::StepMemory(std::shared_ptr<const ActorGraph> plan, int registers, std::size_t capacity)
    : plan_(std::move(plan)), registers_(registers), capacity_(capacity) {
  TROUPE_CHECK(capacity_ >= 1, invalid_argument, "a step memory needs room for at least one plan");
}

StepMemory::~StepMemory() = default;

StepMemory::Entry& StepMemory::entry_for(const std::vector<Shape>& key) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, it);
    return entries_.front();
  }
  if (entries_.size() == capacity_) entries_.pop_back();
  entries_.push_front(Entry{key, nullptr, {}});
  return entries_.front();
}

std::shared_ptr<StepArena> StepMemory::begin(const StepContext& ctx) {
  std::vector<Shape> key;
  for (const auto& part : ctx.inputs)
    for (const Tensor& t : part) key.push_back(t.shape());
  auto step = std::make_shared<StepArena>(plan_, ctx.micro_batches, key);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entry_for(key);
  if (e.plan)
    step->planned_ = e.plan;
  else
    step->recording_ = std::make_shared<Recording>(plan_->actors.size() * static_cast<std::size_t>(ctx.micro_batches));
  return step;
}

void StepMemory::end(StepArena& step, bool failed) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == step.key_; });
  if (it == entries_.end()) return;  // evicted meanwhile
  Entry& e = *it;
  if (step.planned_) {
    ++steps_served_;
    if (failed || step.diverged_) e.plan = nullptr;  // record this shape again
  } else if (step.recording_ && !failed) {
    Recording& r = *step.recording_;
    {
      std::lock_guard<std::mutex> recording_lock(r.mutex);
      r.finished = true;
    }
    try {
      e.plan = plan_recording(r, *plan_, step.micro_batches_, registers_);
      const ArenaLayout& plan = e.plan->arena->plan();
      e.report = graph::MemoryPlanReport{peak_live_bytes(plan.blocks), plan.unplanned_bytes(), plan.arena_bytes,
                                         plan.total_bytes, plan.blocks.size()};
      for (const auto& s : e.plan->signals) e.report.memory_edges += s.size();
      ++plans_built_;
    } catch (const Error&) {
      e.plan = nullptr;  // a plan that fails its own check is never used; the shape records again
    }
  }
  last_ = e.report;
}

graph::MemoryPlanReport StepMemory::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  graph::MemoryPlanReport r = last_;
  r.plans_built = plans_built_;
  r.calls_served = steps_served_;
  return r;
}

}  // namespace troupe::actors
