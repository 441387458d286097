#pragma once
// ZeRO stage 1 (the article's enable_parallel_optimizer) on the data-parallel gradient path: each
// bucket is reduce-scattered instead of all-reduced, so rank r of n holds the reduced gradient of
// elements [r k, (r + 1) k) of every bucket's flat buffer (k = its padded size / n). It updates
// only those elements of the parameters, with an optimizer of the user's kind over pieces of
// them (so it keeps 1/n of the optimizer state), and then every rank's updated elements are
// all-gathered into every rank's parameters.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bucket_plan.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/graph/optim.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// This rank's part of ZeRO-1 for the program's optimizer.
class ZeroShard : public ZeroState {
 public:
  /// `parameters`: per sink the parameter its gradient is for (null tensor for outputs), `names`
  /// their names; `optimizer` is the user's, over the whole parameters; `group` the ranks of the
  /// data-parallel communicator, for the all-gather.
  ZeroShard(std::shared_ptr<const BucketPlan> buckets, const std::vector<Tensor>& parameters,
            const std::vector<std::string>& names, const graph::Optimizer& optimizer,
            std::shared_ptr<transport::Communicator> group);
  /// Elements [begin, end) of bucket `b`'s flat buffer that this rank reduces and updates.
  std::pair<std::int64_t, std::int64_t> slice(std::size_t b) const;
  /// Updates this rank's pieces from `gradients` (whole-shaped, by parameter name: views of the
  /// reduced buckets), then all-gathers the parameters from every rank's pieces.
  void step(const std::map<std::string, Tensor>& gradients);
  std::map<std::string, Tensor> kept() const override { return optimizer_->state_dict(); }
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
  // Every rank's elements of the flat buckets under `piece_value` (this rank's piece's tensor of a
  // slot), all-gathered, written into `whole_value` (a parameter, or a slot of it) by entry.
  void all_gather_pieces(const std::function<Tensor(const Piece&)>& piece_value,
                         const std::function<Tensor(std::size_t sink)>& whole_value) const;
  std::shared_ptr<graph::Optimizer> optimizer_;
  std::vector<std::string> names_;  // per sink
  std::int64_t steps_ = 0;          // updates so far (the same on every rank)
  std::shared_ptr<transport::Communicator> group_;
};

}  // namespace troupe::actors
