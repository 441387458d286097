#include "zero_shard.hpp"

#include <algorithm>

#include "trace_hooks.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

ZeroShard::ZeroShard(std::shared_ptr<const BucketLayout> buckets, const std::vector<Tensor>& parameters,
                     const std::vector<std::string>& names, const std::vector<int>& indices, std::shared_ptr<const graph::Optimizer> optimizer,
                     std::shared_ptr<transport::Communicator> group)
    : buckets_(std::move(buckets)), parameters_(parameters), names_(names), source_(std::move(optimizer)), group_(std::move(group)),
      gathered_(buckets_->buckets.size(), 1), track_(Tracer::instance().register_actor("communicator " + group_->name())) {
  for (std::size_t b = 0; b < buckets_->buckets.size(); ++b) {
    const auto [lo, hi] = slice(b);
    for (const BucketEntry& e : buckets_->buckets[b]) {
      const auto sink = static_cast<std::size_t>(e.sink);
      const int index = indices.at(sink);
      if (index >= 0) {
        if (bucket_of_.size() <= static_cast<std::size_t>(index)) bucket_of_.resize(static_cast<std::size_t>(index) + 1, -1);
        bucket_of_[static_cast<std::size_t>(index)] = static_cast<int>(b);
      }
      const Tensor& p = parameters_.at(sink);
      TROUPE_CHECK(p.is_contiguous(), invalid_argument, "ZeRO-1: parameter '", names[sink],
                   "' is not contiguous; its optimizer state cannot be split into pieces");
      const std::int64_t begin = std::max(lo, e.offset) - e.offset, end = std::min(hi, e.offset + shape_numel(e.shape)) - e.offset;
      if (begin >= end) continue;
      const std::string piece = names[sink] + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
      pieces_.push_back({names[sink], begin, end, graph::Var::leaf(p.reshape({p.numel()}).slice(0, begin, end), piece), b,
                         e.offset + begin});
    }
  }
  optimizer_ = source_->regrouped([&](const std::vector<graph::Var>& group) {
    std::vector<graph::Var> out;
    for (const Piece& piece : pieces_)
      if (std::any_of(group.begin(), group.end(), [&](const graph::Var& p) { return p.name() == piece.name; }))
        out.push_back(piece.var);
    return out;
  });
}

std::pair<std::int64_t, std::int64_t> ZeroShard::slice(std::size_t b) const {
  const std::int64_t k = buckets_->numel[b] / group_->size();
  return {group_->rank() * k, (group_->rank() + 1) * k};
}

ZeroShard::~ZeroShard() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
}

bool ZeroShard::when(int bucket, Then then) {
  if (settled_.load(std::memory_order_acquire)) return true;
  const std::lock_guard<std::mutex> lock(mu_);
  if (failed_) std::rethrow_exception(failed_);
  if (bucket >= 0 ? gathered_[static_cast<std::size_t>(bucket)] != 0 : unwritten_ == 0) return true;
  waiters_.emplace_back(bucket, std::move(then));
  return false;
}

bool ZeroShard::when_gathered(int index, Then then) {
  if (index < 0 || static_cast<std::size_t>(index) >= bucket_of_.size() || bucket_of_[static_cast<std::size_t>(index)] < 0)
    return true;
  return when(bucket_of_[static_cast<std::size_t>(index)], std::move(then));
}

bool ZeroShard::when_settled(Then then) { return when(-1, std::move(then)); }

std::vector<ZeroShard::Then> ZeroShard::written(int bucket) {
  std::vector<Then> tell;
  if (bucket >= 0) {
    gathered_[static_cast<std::size_t>(bucket)] = 1;
    if (--unwritten_ == 0) settled_.store(true, std::memory_order_release);
  }
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (bucket < 0 || it->first == bucket || (it->first < 0 && unwritten_ == 0)) {
      tell.push_back(std::move(it->second));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  cv_.notify_all();
  return tell;
}

void ZeroShard::settle() const {
  if (settled_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return unwritten_ == 0 || failed_; });
  if (failed_) std::rethrow_exception(failed_);
}

void ZeroShard::step(const std::map<std::string, Tensor>& gradients) {
  {
    // (the last step's all-gather writes the parameters these pieces view: the optimizer actor
    // updates once it is over, when_settled)
    const std::lock_guard<std::mutex> lock(mu_);
    if (failed_) std::rethrow_exception(failed_);
    TROUPE_CHECK(unwritten_ == 0, runtime, "ZeRO-1: update ", steps_ + 1,
                 " began before the last all-gather wrote every parameter");
  }
  for (const Piece& piece : pieces_) {
    const auto it = gradients.find(piece.name);
    if (it == gradients.end()) {
      piece.var.zero_grad();
      continue;
    }
    const Tensor& g = it->second;
    piece.var.set_grad(g.reshape({g.numel()}).slice(0, piece.begin, piece.end));
  }
  for (std::size_t g = 0; g < source_->groups(); ++g) optimizer_->set_lr(source_->lr(g), g);
  optimizer_->step();
  optimizer_->zero_grad();
  ++steps_;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    std::fill(gathered_.begin(), gathered_.end(), 0);
    unwritten_ = static_cast<int>(gathered_.size());
    ++in_flight_;
    settled_.store(unwritten_ == 0, std::memory_order_release);
  }
  const std::int64_t step = steps_;
  const auto tell = [](const std::vector<Then>& waiters, const std::exception_ptr& e) {
    for (const Then& then : waiters) then(e);
  };
  // The forward reads the first layers first, whose gradients were bucketed last.
  group_->submit(
      [this, tell, step](transport::ProcessGroup& g) {
        for (std::size_t b = buckets_->buckets.size(); b-- > 0;) {
          {
            HandlerTrace span(track_, "all-gather", 0, static_cast<std::uint64_t>(step), -1);  // a slice per bucket
            gather_bucket(g, b, [](const Piece& piece) { return piece.var.tensor(); },
                          [&](std::size_t sink) { return parameters_[sink]; });
          }
          std::vector<Then> waiters;
          {
            const std::lock_guard<std::mutex> lock(mu_);
            waiters = written(static_cast<int>(b));
          }
          tell(waiters, nullptr);
        }
      },
      [this, step, tell](std::exception_ptr error) {
        if (error) {
          try {
            std::rethrow_exception(error);
          } catch (const Error& e) {
            error = std::make_exception_ptr(Error(e.kind(), "ZeRO-1: the all-gather of the parameters updated in step " +
                                                                std::to_string(step) + " failed: " + e.message()));
          } catch (...) {
          }
        }
        std::vector<Then> waiters;
        {
          const std::lock_guard<std::mutex> lock(mu_);
          if (error) {
            failed_ = error;
            settled_.store(false, std::memory_order_release);
            waiters = written(-1);
          }
          --in_flight_;
          cv_.notify_all();
        }
        tell(waiters, error);
      });
}

void ZeroShard::gather_bucket(transport::ProcessGroup& g, std::size_t b, const std::function<Tensor(const Piece&)>& piece_value,
                              const std::function<Tensor(std::size_t sink)>& whole_value) const {
  const auto [lo, hi] = slice(b);
  const Tensor mine = Tensor::zeros({hi - lo});
  for (const Piece& piece : pieces_)
    if (piece.bucket == b) mine.slice(0, piece.flat - lo, piece.flat - lo + piece.end - piece.begin).copy_from(piece_value(piece));
  const Tensor all = g.all_gather(mine);
  for (const BucketEntry& e : buckets_->buckets[b]) {
    const Tensor whole = whole_value(static_cast<std::size_t>(e.sink));
    whole.reshape({whole.numel()}).copy_from(all.slice(0, e.offset, e.offset + shape_numel(e.shape)));
  }
}

std::map<std::string, Tensor> ZeroShard::gather() const {
  settle();
  std::map<std::string, Tensor> mine = optimizer_->state_dict(), out;
  for (const auto& [key, value] : mine)
    if (key.rfind("group", 0) == 0) out[key] = value;  // the groups' learning rates
  if (steps_ == 0) return out;  // no state yet, on any rank
  for (const std::string& slot : optimizer_->slots()) {
    for (const std::vector<BucketEntry>& bucket : buckets_->buckets)
      for (const BucketEntry& e : bucket) out[names_[static_cast<std::size_t>(e.sink)] + "." + slot] = Tensor::zeros(e.shape);
    group_->submit([&](transport::ProcessGroup& g) {
            for (std::size_t b = 0; b < buckets_->buckets.size(); ++b)
              gather_bucket(g, b, [&](const Piece& piece) { return mine.at(piece.var.name() + "." + slot); },
                            [&](std::size_t sink) { return out.at(names_[sink] + "." + slot); });
          })
        .get();
  }
  for (const std::vector<BucketEntry>& bucket : buckets_->buckets)
    for (const BucketEntry& e : bucket)
      out[names_[static_cast<std::size_t>(e.sink)] + ".step"] = Tensor::from_vector<std::int64_t>({steps_}, {});
  return out;
}

void ZeroShard::load(const std::map<std::string, Tensor>& whole) {
  settle();
  std::map<std::string, Tensor> mine;
  for (const auto& [key, value] : whole)
    if (key.rfind("group", 0) == 0) mine[key] = value;
  for (const Piece& piece : pieces_) {
    const auto step = whole.find(piece.name + ".step");
    if (step == whole.end()) continue;  // not stepped yet
    for (const std::string& slot : optimizer_->slots()) {
      const auto it = whole.find(piece.name + "." + slot);
      TROUPE_CHECK(it != whole.end(), invalid_argument, "ZeRO-1: the optimizer state has a step but no '", slot,
                   "' for parameter '", piece.name, "'");
      const Tensor& t = it->second;
      TROUPE_CHECK(t.numel() >= piece.end, shape_mismatch, "ZeRO-1: the optimizer state's '", piece.name, ".", slot,
                   "' has ", t.numel(), " elements, but the parameter has at least ", piece.end);
      mine[piece.var.name() + "." + slot] = t.contiguous().reshape({t.numel()}).slice(0, piece.begin, piece.end).clone();
    }
    mine[piece.var.name() + ".step"] = step->second;
  }
  optimizer_->load_state_dict(mine);
  // The parameters step together: any one's count is the run's, also on a rank without pieces.
  steps_ = 0;
  for (const auto& [key, value] : whole)
    if (key.size() > 5 && key.compare(key.size() - 5, 5, ".step") == 0) steps_ = value.to_vector<std::int64_t>().at(0);
}

}  // namespace troupe::actors
