// Tensor parallelism in the runtime (troupe/actors/tensor_parallel.hpp): a sharded step's collective
// group over a transport communicator, and the parameters clipping counts once per group.
#include "troupe/actors/tensor_parallel.hpp"

#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

class CommunicatorGroup : public graph::CollectiveGroup {
 public:
  CommunicatorGroup(std::shared_ptr<transport::Communicator> comm, std::string axis)
      : comm_(std::move(comm)), axis_(std::move(axis)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void all_reduce(const Tensor& tensor) override {
    comm_->submit([&](transport::ProcessGroup& g) { g.all_reduce(tensor); }).get();
  }
  Tensor all_gather(const Tensor& tensor) override {
    Tensor all;
    comm_->submit([&](transport::ProcessGroup& g) { all = g.all_gather(tensor); }).get();
    return all;
  }
  Tensor reduce_scatter(const Tensor& tensor) override {
    Tensor part;
    comm_->submit([&](transport::ProcessGroup& g) { part = g.reduce_scatter(tensor); }).get();
    return part;
  }
  std::string name() const override {
    return axis_ + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
  }

 private:
  std::shared_ptr<transport::Communicator> comm_;
  std::string axis_;
};

}  // namespace

std::shared_ptr<graph::CollectiveGroup> communicator_group(std::shared_ptr<transport::Communicator> comm, std::string axis) {
  TROUPE_CHECK(comm != nullptr, invalid_argument, "communicator_group: the communicator for axis '", axis, "' is null");
  return std::make_shared<CommunicatorGroup>(std::move(comm), std::move(axis));
}

std::vector<std::string> replicated_parameters(const graph::TracedFunction& step, const graph::ShardingPlan& plan, int axis) {
  std::vector<std::string> out;
  for (std::size_t k = 0; k < step.parameters().size(); ++k)
    if (plan.placements.at(step.graph().parameters()[k]).at(static_cast<std::size_t>(axis)).kind != graph::Placement::Kind::split)
      out.push_back(step.parameters()[k].name());
  return out;
}

}  // namespace troupe::actors
