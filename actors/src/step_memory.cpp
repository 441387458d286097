#include "step_memory.hpp"

#include <algorithm>
#include <atomic>
#include <optional>

#include "troupe/kernels/error.hpp"

namespace troupe::actors {

namespace {

// The act this thread is in, so that the recorder knows who dropped a block; -1 outside acts.
thread_local int current_act = -1;

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

  explicit Recording(std::size_t acts) : act_blocks(acts) {}

  void released(std::size_t k) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (finished) return;
    blocks[k].end = tick++;
    dropped[k] = current_act;
  }
};

// A shape's plan: the arena, and which block each act's k-th allocation takes.
struct StepPlan {
  std::shared_ptr<PlannedArena> arena;
  std::vector<std::vector<std::size_t>> act_blocks;
  bool any_order = false;  // planned for every order of the acts, not only the recorded one
};

}  // namespace

// reach_[a] has bit b when act a comes before act b. Actors are numbered in topological order,
// so every edge goes to a higher act number and one backward pass closes the relation.
ActOrder::ActOrder(const ActorPlan& plan, int micro_batches, int registers)
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

namespace {

}  // namespace

class StepArena {
 public:
  StepArena(std::shared_ptr<const ActorPlan> plan, int micro_batches, std::vector<Shape> key)
      : plan_(std::move(plan)), actors_(static_cast<int>(plan_->actors.size())), micro_batches_(micro_batches), key_(std::move(key)) {}

  int act_id(int actor, int mb) const { return ActOrder::act(actor, mb, actors_); }

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
    const MemoryPlan& plan = planned_->arena->plan();
    if (k >= mine.size() || plan.blocks[mine[k]].bytes != bytes) {
      diverged_ = true;
      return {};
    }
    MemoryLease lease = planned_->arena->lease_block(mine[k]);
    // An escaping block whose slots still hold results someone kept is simply allocated; a step
    // block whose bytes are in use means this step's lifetimes differ from the recorded ones.
    if (!lease.data && !plan.blocks[mine[k]].escaped()) diverged_ = true;
    return lease;
  }

  void act_done(int act, std::size_t count) {
    if (planned_ && count != planned_->act_blocks[static_cast<std::size_t>(act)].size()) diverged_ = true;
  }

  void emitted(int actor, int mb, const std::vector<Tensor>& values) {
    if (!recording_) return;
    Recording& r = *recording_;
    for (const Tensor& t : values) {
      if (!t.defined() || t.storage()->lease().owner.get() != &r) continue;
      std::lock_guard<std::mutex> lock(r.mutex);
      for (int c : plan_->actors[static_cast<std::size_t>(actor)].consumers)
        r.readers[t.storage()->lease().index].push_back(act_id(c, mb));
    }
  }

 private:
  friend class StepMemory;
  std::shared_ptr<const ActorPlan> plan_;
  int actors_, micro_batches_;
  std::vector<Shape> key_;
  std::shared_ptr<Recording> recording_;      // a recording step
  std::shared_ptr<const StepPlan> planned_;  // a planned step
  std::atomic<bool> diverged_{false};
};

ActMemory::ActMemory(StepArena* step, int actor, int mb)
    : step_(step), actor_(actor), mb_(mb), act_(step ? step->act_id(actor, mb) : -1), outer_act_(current_act) {
  current_act = act_;
}

ActMemory::~ActMemory() {
  if (step_) step_->act_done(act_, next_);
  current_act = outer_act_;
}

void ActMemory::emitted(const std::vector<Tensor>& values) {
  if (step_) step_->emitted(actor_, mb_, values);
}

MemoryLease ActMemory::lease(std::size_t bytes) { return step_ ? step_->lease(act_, next_++, bytes) : MemoryLease{}; }

namespace {

// Plans `r` in one arena. For the order the recorded step ran in (tick intervals), or for every
// order the protocol allows (the file comment). The plan checks itself; a failed check throws.
std::shared_ptr<const StepPlan> plan_recording(const Recording& r, const ActorPlan& actors, int micro_batches,
                                               int registers, bool any_order) {
  std::optional<ActOrder> order;
  const auto before = [&](int a, int b) { return order->before(a, b); };
  // Block i is dead before block j is born when every act that could touch i comes before the
  // act that makes j, or, within one act, i was a temporary dropped before j was asked for. A
  // block dropped outside the acts (an optimizer let go of a gradient) lives to the step's end.
  const auto dead_before = [&](std::size_t i, std::size_t j) {
    const int dropped = r.dropped[i], maker = r.born[j];
    if (dropped < 0) return false;
    if (r.born[i] == maker) return dropped == maker && r.readers[i].empty() && r.blocks[i].end <= r.blocks[j].begin;
    if (!before(r.born[i], maker) || !before(dropped, maker)) return false;
    return std::all_of(r.readers[i].begin(), r.readers[i].end(), [&](int a) { return before(a, maker); });
  };
  LifetimeOverlap overlap;
  if (any_order) {
    order.emplace(actors, micro_batches, registers);
    overlap = [&](std::size_t i, std::size_t j) { return !dead_before(i, j) && !dead_before(j, i); };
  }
  // One slot per result: a training loop drops a step's result before the next; a result still
  // held then is allocated afresh.
  auto planned = std::make_shared<StepPlan>();
  planned->arena = std::make_shared<PlannedArena>(MemoryPlan::build(r.blocks, 1, overlap), overlap);
  planned->act_blocks = r.act_blocks;
  planned->any_order = any_order;
  return planned;
}

}  // namespace

struct StepMemory::Entry {
  std::vector<Shape> key;
  std::shared_ptr<const Recording> recording;  // the step recorded for this shape
  std::shared_ptr<const StepPlan> plan;        // null until recorded, and after a divergence
  graph::MemoryPlanReport report;
};

StepMemory::StepMemory(std::shared_ptr<const ActorPlan> plan, int registers, bool one_thread, std::size_t capacity)
    : plan_(std::move(plan)), registers_(registers), one_thread_(one_thread), capacity_(capacity) {
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
  entries_.push_front(Entry{key, nullptr, nullptr, {}});
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
  bool any_order = !one_thread_;
  if (step.planned_) {
    ++steps_served_;
    last_ = e.report;
    if (!failed && !step.diverged_) return;
    // On one scheduler thread the first plan follows the recorded order, the tightest; a step that
    // ran in another order gets the plan for every order from the same recording; any other
    // difference records again.
    any_order = !failed && !step.planned_->any_order;
    e.plan = nullptr;
    if (!any_order) {
      e.recording = nullptr;
      return;
    }
  } else if (step.recording_ && !failed) {
    {
      std::lock_guard<std::mutex> recording_lock(step.recording_->mutex);
      step.recording_->finished = true;
    }
    e.recording = step.recording_;
  } else {
    return;
  }
  try {
    e.plan = plan_recording(*e.recording, *plan_, step.micro_batches_, registers_, any_order);
    const MemoryPlan& plan = e.plan->arena->plan();
    e.report = graph::MemoryPlanReport{peak_live_bytes(plan.blocks), plan.unplanned_bytes(), plan.arena_bytes,
                                       plan.total_bytes, plan.blocks.size(), 0, 0};
    ++plans_built_;
  } catch (const Error&) {
    e.plan = nullptr;  // a plan that fails its own check is never used; the shape records again
    e.recording = nullptr;
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
