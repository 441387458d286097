#pragma once
// ZeRO stage 1 (the article's enable_parallel_optimizer) on the data-parallel gradient path: each
// bucket is reduce-scattered instead of all-reduced, so rank r of n holds the reduced gradient of
// elements [r k, (r + 1) k) of every bucket's flat buffer (k = its padded size / n). It updates
// only those elements of the parameters, with an optimizer of the user's kind over pieces of
// them (so it keeps 1/n of the optimizer state), and then every rank's updated elements are
// all-gathered into every rank's parameters. The all-gather runs after the step has answered, on
// the group's thread, bucket by bucket in the order the forward reads them, so that it overlaps
// the next step's forward. Nobody waits on a thread for it: an op actor reading a parameter asks
// to be told when its bucket is written (when_gathered, a message), and so do the optimizer and
// the step's casts for all of them (when_settled); only callers outside the actors that read the
// parameters between steps wait (settle, Program::settle).

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "bucket_layout.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/graph/optim.hpp"

namespace troupe::transport {
class Communicator;
class ProcessGroup;
}

namespace troupe::actors {

/// This rank's part of ZeRO-1 for the program's optimizer.
class ZeroShard : public ZeroState {
 public:
  /// `parameters`: per sink the parameter its gradient is for (null tensor for outputs), `names`
  /// their names, `indices` their indices among the program's parameters (-1 for outputs);
  /// `optimizer` is the user's, over the whole parameters; `group` the ranks of the data-parallel
  /// communicator, for the all-gather.
  ZeroShard(std::shared_ptr<const BucketLayout> buckets, const std::vector<Tensor>& parameters,
            const std::vector<std::string>& names, const std::vector<int>& indices, std::shared_ptr<const graph::Optimizer> optimizer,
            std::shared_ptr<transport::Communicator> group);
  /// Waits for an all-gather still writing the parameters.
  ~ZeroShard() override;
  /// Elements [begin, end) of bucket `b`'s flat buffer that this rank reduces and updates.
  std::pair<std::int64_t, std::int64_t> slice(std::size_t b) const;
  /// Updates this rank's pieces from `gradients` (whole-shaped, by parameter name: views of the
  /// reduced buckets) at the user's optimizer's learning rates as they are now (a schedule sets
  /// them there between steps), then starts the all-gather of the parameters from every rank's pieces.
  void step(const std::map<std::string, Tensor>& gradients);
  /// Runs after an update, once its all-gather is over.
  using Then = std::function<void(std::exception_ptr)>;
  /// True when the last all-gather has written the program's parameter `index` (or ZeRO-1 does not
  /// update it); otherwise `then` runs once on the group's thread when it has (null) or when the
  /// all-gather failed. Throws an earlier all-gather's failure.
  bool when_gathered(int index, Then then);
  /// The same for every parameter: the all-gather has written them all.
  bool when_settled(Then then);
  /// Waits until the last all-gather has written every parameter; rethrows its failure. For callers
  /// that may block (between steps), never for an actor.
  void settle() const;
  /// The group thread's track in traces, where the all-gathers' completions come from.
  std::uint32_t track() const { return track_; }
  std::map<std::string, Tensor> kept() const override {
    settle();
    return optimizer_->state_dict();
  }
  std::map<std::string, Tensor> gather() const override;
  void load(const std::map<std::string, Tensor>& whole) override;

 private:
  /// Elements [begin, end) of parameter `name` (flattened), as a leaf viewing them.
  struct Piece {
    std::string name;
    std::int64_t begin = 0, end = 0;
    graph::Var var;
    std::size_t bucket = 0;
    std::int64_t flat = 0;  // where element `begin` is in the bucket's buffer
  };
  std::shared_ptr<const BucketLayout> buckets_;
  std::vector<Tensor> parameters_;  // per sink
  std::vector<Piece> pieces_;
  // Every rank's elements of flat bucket `b` under `piece_value` (this rank's piece's tensor of a
  // slot), all-gathered on `g`, written into `whole_value` (a parameter, or a slot of it) by entry.
  void gather_bucket(transport::ProcessGroup& g, std::size_t b, const std::function<Tensor(const Piece&)>& piece_value,
                     const std::function<Tensor(std::size_t sink)>& whole_value) const;
  std::shared_ptr<graph::Optimizer> optimizer_;
  std::vector<std::string> names_;  // per sink
  std::shared_ptr<const graph::Optimizer> source_;  // the user's, whose learning rates each update takes
  std::int64_t steps_ = 0;          // updates so far (the same on every rank)
  std::shared_ptr<transport::Communicator> group_;
  std::vector<int> bucket_of_;      // per program parameter: its bucket, or -1
  // Adds `then` as a waiter for `bucket` (-1: all of them) unless that is written; throws a failure.
  bool when(int bucket, Then then);
  // Under mu_: bucket `bucket` is written (-1: none, the all-gather failed); returns the waiters to
  // tell, which run outside the lock.
  std::vector<Then> written(int bucket);
  // The last step's all-gather: which buckets it has written, how it failed, who waits for what.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // settle() and the destructor
  std::vector<char> gathered_;
  int unwritten_ = 0;     // buckets not yet written
  int in_flight_ = 0;     // all-gathers submitted and not over
  std::exception_ptr failed_;
  std::atomic<bool> settled_{true};  // every bucket written and none failed: readers need not lock
  std::vector<std::pair<int, Then>> waiters_;  // (bucket, or -1 for all of them; what to run)
  std::uint32_t track_;
};

}  // namespace troupe::actors
