// Tensor parallelism in the runtime (troupe/actors/tensor_parallel.hpp): a sharded step's collective
// group over a transport communicator, and the parameters clipping counts once per group.
#include "troupe/actors/tensor_parallel.hpp"

#include "communicator_group.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/spmd.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

// The blocking collectives of a communicator's process group, on the communicator's thread.
class ProcessGroupWire : public graph::CollectiveWire {
 public:
  explicit ProcessGroupWire(transport::ProcessGroup& g) : g_(g) {}
  void all_reduce(const Tensor& tensor) override { g_.all_reduce(tensor); }
  Tensor all_gather(const Tensor& tensor) override { return g_.all_gather(tensor); }
  Tensor reduce_scatter(const Tensor& tensor) override { return g_.reduce_scatter(tensor); }
  void send(const Tensor& tensor, int peer) override { g_.send(tensor, peer); }
  void recv(const Tensor& into, int peer) override { g_.recv(into, peer); }

 private:
  transport::ProcessGroup& g_;
};

}  // namespace

CommunicatorGroup::CommunicatorGroup(std::shared_ptr<transport::Communicator> comm, std::string axis)
    : comm_(std::move(comm)), axis_(std::move(axis)), track_(Tracer::instance().register_actor("communicator " + axis_)) {}

int CommunicatorGroup::rank() const { return comm_->rank(); }

int CommunicatorGroup::size() const { return comm_->size(); }

void CommunicatorGroup::submit(std::function<void(graph::CollectiveWire&)> work, graph::CollectiveDone done) {
  comm_->submit(
      [work = std::move(work)](transport::ProcessGroup& g) {
        ProcessGroupWire wire(g);
        work(wire);
      },
      std::move(done));
}

std::string CommunicatorGroup::name() const {
  return axis_ + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
}

std::shared_ptr<graph::CollectiveGroup> communicator_group(std::shared_ptr<transport::Communicator> comm, std::string axis) {
  TROUPE_CHECK(comm != nullptr, invalid_argument, "communicator_group: the communicator for axis '", axis, "' is null");
  return std::make_shared<CommunicatorGroup>(std::move(comm), std::move(axis));
}

std::vector<std::string> replicated_parameters(const graph::TracedFunction& step, const graph::GraphPlacement& plan, int axis) {
  std::vector<std::string> out;
  for (std::size_t k = 0; k < step.parameters().size(); ++k)
    if (plan.placements.at(step.graph().parameters()[k]).at(static_cast<std::size_t>(axis)).kind != graph::Placement::Kind::split)
      out.push_back(step.parameters()[k].name());
  return out;
}

TensorParallelStep::TensorParallelStep(const graph::TracedFunction& step, graph::GraphPlacement plan,
                                       std::shared_ptr<transport::Communicator> comm)
    : plan_(std::move(plan)) {
  TROUPE_CHECK(plan_.mesh.axes.size() == 1, invalid_argument, "tensor parallel step: the plan's mesh ", plan_.mesh.str(),
               " must have one axis");
  const auto& [axis, size] = plan_.mesh.axes[0];
  TROUPE_CHECK(comm && comm->size() == size, invalid_argument, "tensor parallel step: the '", axis, "' group has ",
               comm ? comm->size() : 0, " devices, but the plan's mesh ", plan_.mesh.str(), " needs ", size);
  const int rank = comm->rank();
  group_ = std::make_unique<graph::GroupRegistration>(communicator_group(std::move(comm), axis));
  local_ = graph::shard_step(step, plan_, graph::MeshDevice{{rank}, {group_->id()}});
  for (std::size_t k = 0; k < step.parameters().size(); ++k) {
    const graph::Placement& p = plan_.placements.at(step.graph().parameters()[k])[0];
    if (size > 1 && p.kind == graph::Placement::Kind::split) splits_[step.parameters()[k].name()] = p;
  }
  replicated_ = replicated_parameters(step, plan_, 0);
}

TensorParallelStep::~TensorParallelStep() = default;

std::vector<graph::Var> TensorParallelStep::trained() const {
  std::vector<graph::Var> out;
  for (std::size_t k : local_.gradient_parameters()) out.push_back(local_.parameters()[k]);
  return out;
}

std::map<std::string, Tensor> TensorParallelStep::parameter_shards() const {
  std::map<std::string, Tensor> out;
  for (const graph::Var& p : local_.parameters()) out[p.name()] = p.tensor();
  return out;
}

const graph::Placement* TensorParallelStep::split_of(const std::string& key) const {
  // The longest parameter name that is the key or its prefix before a '.'.
  const graph::Placement* found = nullptr;
  std::size_t longest = 0;
  for (const auto& [name, p] : splits_)
    if ((key == name || (key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '.')) &&
        name.size() > longest) {
      found = &p;
      longest = name.size();
    }
  return found;
}

std::map<std::string, Tensor> TensorParallelStep::gather(const std::map<std::string, Tensor>& shards) const {
  std::map<std::string, Tensor> out;
  for (const auto& [key, shard] : shards) {
    const graph::Placement* p = split_of(key);
    if (!p || shard.dim() <= p->dim) {  // whole, or a per-parameter scalar (a step count)
      out[key] = shard;
      continue;
    }
    graph::run_on(*group_->group(), [&](graph::CollectiveWire& wire) {
      out[key] = graph::gather_block_slices(wire, shard, p->dim, p->blocks);
    });
  }
  return out;
}

std::map<std::string, Tensor> TensorParallelStep::shard(const std::map<std::string, Tensor>& whole) const {
  std::map<std::string, Tensor> out;
  for (const auto& [key, t] : whole) {
    const graph::Placement* p = split_of(key);
    out[key] = !p || t.dim() <= p->dim ? t : graph::block_slice(t, p->dim, p->blocks, group_->group()->size(), group_->group()->rank()).clone();
  }
  return out;
}

}  // namespace troupe::actors
