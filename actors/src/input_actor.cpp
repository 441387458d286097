// The input actor: the first node of every plan. It has no inputs; each firing hands one
// micro-batch's slice of the step's inputs to the nodes that read them, as fast as registers free up.
#include "actor_kinds.hpp"

namespace troupe::actors {

namespace {

class InputKind : public NodeKind {
 public:
  Values act(Node& node, int mb) override {
    return std::make_shared<const std::vector<Tensor>>(node.ctx().inputs[static_cast<std::size_t>(mb)]);
  }
};

}  // namespace

std::shared_ptr<NodeKind> input_kind() { return std::make_shared<InputKind>(); }

std::shared_ptr<NodeKind> kind_of(const ActorSpec& spec, std::shared_ptr<const graph::Graph> graph) {
  switch (spec.kind) {
    case ActorSpec::Kind::input: return input_kind();
    case ActorSpec::Kind::op: return op_kind(std::move(graph), spec);
    case ActorSpec::Kind::sink: return spec.gradient ? gradient_stage_kind() : output_sink_kind();
  }
  fail(ErrorKind::runtime, "actor '", spec.name, "' has no kind");
}

}  // namespace troupe::actors
