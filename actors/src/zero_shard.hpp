#pragma once
// ZeRO stage 1 (the article's enable_parallel_optimizer) on the data-parallel gradient path: each
// bucket is reduce-scattered instead of all-reduced, so rank r of n holds the reduced gradient of
// elements [r k, (r + 1) k) of every bucket's flat buffer (k = its padded size / n). It updates
// only those elements of the parameters, with an optimizer of the user's kind over pieces of
// them (so it keeps 1/n of the optimizer state), and then every rank's updated elements are
// all-gathered into every rank's parameters. The all-gather runs after the step has answered, on
// the group's thread, bucket by bucket in the order the forward reads them, so that it overlaps
// the next step's forward: an op reading a parameter waits for its bucket (wait_for), and whoever
// reads the parameters between steps settles first (settle, Program::settle).

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "bucket_plan.hpp"
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
  ZeroShard(std::shared_ptr<const BucketPlan> buckets, const std::vector<Tensor>& parameters,
            const std::vector<std::string>& names, const std::vector<int>& indices, const graph::Optimizer& optimizer,
            std::shared_ptr<transport::Communicator> group);
  /// Waits for an all-gather still writing the parameters.
  ~ZeroShard() override;
  /// Elements [begin, end) of bucket `b`'s flat buffer that this rank reduces and updates.
  std::pair<std::int64_t, std::int64_t> slice(std::size_t b) const;
  /// Updates this rank's pieces from `gradients` (whole-shaped, by parameter name: views of the
  /// reduced buckets), then starts the all-gather of the parameters from every rank's pieces.
  void step(const std::map<std::string, Tensor>& gradients);
  /// Waits until the last all-gather has written the program's parameter `index` (at once when it
  /// has, or when ZeRO-1 does not update it); rethrows the all-gather's failure.
  void wait_for(int index) const;
  /// Waits until the last all-gather is over; rethrows its failure.
  void settle() const;
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
  std::shared_ptr<const BucketPlan> buckets_;
  std::vector<Tensor> parameters_;  // per sink
  std::vector<Piece> pieces_;
  // Every rank's elements of flat bucket `b` under `piece_value` (this rank's piece's tensor of a
  // slot), all-gathered on `g`, written into `whole_value` (a parameter, or a slot of it) by entry.
  void gather_bucket(transport::ProcessGroup& g, std::size_t b, const std::function<Tensor(const Piece&)>& piece_value,
                     const std::function<Tensor(std::size_t sink)>& whole_value) const;
  std::shared_ptr<graph::Optimizer> optimizer_;
  std::vector<std::string> names_;  // per sink
  std::int64_t steps_ = 0;          // updates so far (the same on every rank)
  std::shared_ptr<transport::Communicator> group_;
  std::vector<int> bucket_of_;      // per program parameter: its bucket, or -1
  // The last step's all-gather: which buckets it has written, whether it is over, how it failed.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<char> gathered_;
  bool in_flight_ = false;
  std::exception_ptr failed_;
  std::atomic<bool> settled_{true};  // over and not failed: readers need not lock
};

}  // namespace troupe::actors
