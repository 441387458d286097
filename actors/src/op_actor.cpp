// An op actor: one node of the graph. Each firing computes the op for one micro-batch, with the
// output shapes bound to that micro-batch's sizes, from the registers of its producers.
#include "actor_kinds.hpp"
#include "trace_hooks.hpp"
#include "troupe/graph/op_def.hpp"

namespace troupe::actors {

namespace {

class OpKind : public NodeKind {
 public:
  OpKind(std::shared_ptr<const graph::Graph> graph, const ActorSpec& spec)
      : graph_(std::move(graph)),
        node_(&graph_->node(spec.node)),
        def_(&graph::OpRegistry::instance().get(node_->op)) {
    for (graph::ValueId o : node_->outputs) dtypes_.push_back(graph_->value(o).info.dtype);
  }

  Values act(Node& node, int mb) override {
    HandlerTrace trace(node.track(), "compute", 0, node.step(), mb);
    const auto failed = [&](const std::string& why) {
      return "op '" + node.spec().name + "' failed in step " + std::to_string(node.step()) + ", micro-batch " +
             std::to_string(mb) + ": " + why;
    };
    try {
      std::vector<Tensor> in;
      for (const InputRef& ref : node.spec().inputs) in.push_back(node.input(ref));
      std::vector<Shape> shapes;
      const graph::SymBindings& bindings = node.ctx().bindings[static_cast<std::size_t>(mb)];
      for (graph::ValueId o : node_->outputs) shapes.push_back(graph::bind(graph_->value(o).info.shape, bindings));
      return std::make_shared<const std::vector<Tensor>>(
          def_->run(in, graph::ComputeContext{node_->attrs, shapes, dtypes_, node_->label}));
    } catch (const Error& e) {
      throw Error(e.kind(), failed(e.message()));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::runtime, failed(e.what()));
    }
  }

 private:
  std::shared_ptr<const graph::Graph> graph_;
  const graph::Node* node_;
  const graph::OpDef* def_;
  std::vector<DType> dtypes_;  // the outputs' dtypes, fixed by the graph
};

}  // namespace

std::shared_ptr<NodeKind> op_kind(std::shared_ptr<const graph::Graph> graph, const ActorSpec& spec) {
  return std::make_shared<OpKind>(std::move(graph), spec);
}

}  // namespace troupe::actors
