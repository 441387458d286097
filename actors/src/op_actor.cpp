// An op actor: one node of the graph. Each firing computes the op for one micro-batch, with the
// output shapes bound to that micro-batch's sizes, from the registers of its producers; a
// collective op's firing suspends while its collective is on the wire (node.hpp's Suspension).
#include "actor_kinds.hpp"
#include "communicator_group.hpp"
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
    return naming(node, mb, [&] {
      const std::vector<Shape> shapes = output_shapes(node, mb);
      return std::make_shared<const std::vector<Tensor>>(def_->run(inputs(node), context(node, mb, shapes)));
    });
  }

  // A collective: its call is made here, runs on its group's thread (traced there, with flows from
  // this op and back to it) and finishes here when the completion comes back.
  bool suspends() const override { return def_->collective != nullptr; }

  Suspension begin(Node& node, int mb) override {
    HandlerTrace trace(node.track(), "compute", 0, node.step(), mb);
    graph::CollectiveCall call = naming(node, mb, [&] {
      const std::vector<Shape> shapes = output_shapes(node, mb);
      return def_->start(inputs(node), context(node, mb, shapes));
    });
    const auto* group = dynamic_cast<const CommunicatorGroup*>(call.group.get());
    const std::uint32_t track = group ? group->track() : node.track();
    const std::uint64_t step = node.step();
    const std::uint64_t flow = trace_send(node.track(), track, def_->name, step, mb);
    Suspension s;
    s.track = track;
    s.launch = [group = std::move(call.group), work = std::move(call.on_wire), track, flow, step, mb,
                name = def_->name](std::function<void(std::exception_ptr)> over) {
      group->submit(
          [work, track, flow, step, mb, name](graph::CollectiveWire& wire) {
            HandlerTrace span(track, name, flow, step, mb);
            work(wire);
          },
          std::move(over));
    };
    s.resume = [this, &node, mb, finish = std::move(call.finish)](std::exception_ptr error) -> Values {
      return naming(node, mb, [&] { return std::make_shared<const std::vector<Tensor>>(finish(error)); });
    };
    return s;
  }

 private:
  // Runs f; an error it throws names the op, step and micro-batch.
  template <class F>
  auto naming(const Node& node, int mb, F&& f) const -> decltype(f()) {
    const auto failed = [&](const std::string& why) {
      return "op '" + node.spec().name + "' failed in step " + std::to_string(node.step()) + ", micro-batch " +
             std::to_string(mb) + ": " + why;
    };
    try {
      return f();
    } catch (const Error& e) {
      throw Error(e.kind(), failed(e.message()));
    } catch (const std::exception& e) {
      throw Error(ErrorKind::runtime, failed(e.what()));
    }
  }
  std::vector<Tensor> inputs(const Node& node) const {
    std::vector<Tensor> in;
    for (const InputRef& ref : node.spec().inputs) in.push_back(node.input(ref));
    return in;
  }
  // The outputs' shapes bound to micro-batch `mb`'s sizes.
  std::vector<Shape> output_shapes(const Node& node, int mb) const {
    std::vector<Shape> shapes;
    const graph::SymBindings& bindings = node.ctx().bindings[static_cast<std::size_t>(mb)];
    for (graph::ValueId o : node_->outputs) shapes.push_back(graph::bind(graph_->value(o).info.shape, bindings));
    return shapes;
  }
  graph::ComputeContext context(const Node& node, int mb, const std::vector<Shape>& shapes) const {
    return graph::ComputeContext{node_->attrs, shapes, dtypes_, node_->label, node.ctx().random[static_cast<std::size_t>(mb)]};
  }

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
