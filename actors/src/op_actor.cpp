// An op actor: one node of the graph, or a chain of cheap ones lowering grouped (actor_graph.hpp).
// Each firing computes its nodes for one micro-batch, with the output shapes bound to that
// micro-batch's sizes, from the registers of its producers (in a stream-ordered program, node.cpp
// puts the act under its stream's guard, so its kernels are queued there); a collective op's
// firing suspends while its collective is on the wire (node.hpp's Suspension).
#include <algorithm>
#include <optional>

#include "actor_kinds.hpp"
#include "communicator_group.hpp"
#include "trace_hooks.hpp"
#include "troupe/graph/op_def.hpp"

namespace troupe::actors {

namespace {

class OpKind : public NodeKind {
 public:
  OpKind(std::shared_ptr<const graph::Graph> graph, const ActorSpec& spec) : graph_(std::move(graph)) {
    Tracer& tracer = Tracer::instance();
    for (const Member& m : spec.members) {
      Step s{&m, &graph_->node(m.node), &graph::OpRegistry::instance().get(graph_->node(m.node).op), {}, 0, {}};
      for (graph::ValueId o : s.node->outputs) s.dtypes.push_back(graph_->value(o).info.dtype);
      // A grouped node's kernel time shows on a track of its own, under its own name.
      if (spec.members.size() > 1) s.track = tracer.register_actor(m.name);
      steps_.push_back(std::move(s));
    }
    // The act lets go of an input after its last reader in the act, and of a value no other actor
    // reads right after its last reader (or at once): a grouped act's later members reuse the memory.
    for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
      std::size_t last = 0;
      for (std::size_t r = 0; r < steps_.size(); ++r)
        for (const MemberInput& in : steps_[r].member->inputs)
          if (in.member < 0 && in.index == static_cast<int>(k)) last = r;
      steps_[last].drops.push_back({-1, static_cast<int>(k)});
    }
    for (std::size_t m = 0; m < steps_.size(); ++m)
      for (std::size_t o = 0; o < steps_[m].node->outputs.size(); ++o) {
        const std::pair<int, int> value{static_cast<int>(m), static_cast<int>(o)};
        if (std::find(spec.outputs.begin(), spec.outputs.end(), value) != spec.outputs.end()) continue;
        std::size_t last = m;
        for (std::size_t r = m + 1; r < steps_.size(); ++r)
          for (const MemberInput& in : steps_[r].member->inputs)
            if (in.member == value.first && in.index == value.second) last = r;
        steps_[last].drops.push_back(value);
      }
  }

  Values act(Node& node, int mb) override {
    std::vector<Tensor> given = node.take_inputs();
    std::vector<std::vector<Tensor>> made(steps_.size());
    for (std::size_t m = 0; m < steps_.size(); ++m) {
      const Step& s = steps_[m];
      HandlerTrace trace(s.track ? s.track : node.track(), "compute", 0, node.step(), mb);
      // Kernels queued on a stream fail later, there: their error is named the same way.
      std::optional<WorkLabel> queued;
      if (current_stream()) queued.emplace(failed(node, s, mb));
      made[m] = naming(node, s, mb, [&] {
        const std::vector<Shape> shapes = output_shapes(node, s, mb);
        return s.def->run(inputs(s, given, made), context(node, s, mb, shapes));
      });
      for (const auto& [member, output] : s.drops)
        (member < 0 ? given[static_cast<std::size_t>(output)]
                    : made[static_cast<std::size_t>(member)][static_cast<std::size_t>(output)]) = Tensor();
    }
    auto out = std::make_shared<std::vector<Tensor>>();
    for (const auto& [member, output] : node.spec().outputs)
      out->push_back(std::move(made[static_cast<std::size_t>(member)][static_cast<std::size_t>(output)]));
    return out;
  }

  // A collective: its call is made here, runs on its group's thread (traced there, with flows from
  // this op and back to it) and finishes here when the completion comes back.
  // Lowering gives a collective an actor of its own.
  bool suspends() const override { return steps_[0].def->collective != nullptr; }

  Suspension begin(Node& node, int mb) override {
    HandlerTrace trace(node.track(), "compute", 0, node.step(), mb);
    const Step& s = steps_[0];
    graph::CollectiveCall call = naming(node, s, mb, [&] {
      const std::vector<Shape> shapes = output_shapes(node, s, mb);
      std::vector<Tensor> given;
      for (const InputRef& ref : node.spec().inputs) given.push_back(node.input(ref));
      return s.def->start(inputs(s, given, {}), context(node, s, mb, shapes));
    });
    const auto* group = dynamic_cast<const CommunicatorGroup*>(call.group.get());
    const std::uint32_t track = group ? group->track() : node.track();
    const std::uint64_t step = node.step();
    const std::uint64_t flow = trace_send(node.track(), track, s.def->name, step, mb);
    Suspension suspension;
    suspension.track = track;
    suspension.launch = [group = std::move(call.group), work = std::move(call.on_wire), track, flow, step, mb,
                name = s.def->name](std::function<void(std::exception_ptr)> over) {
      group->submit(
          [work, track, flow, step, mb, name](graph::CollectiveWire& wire) {
            HandlerTrace span(track, name, flow, step, mb);
            work(wire);
          },
          std::move(over));
    };
    suspension.resume = [this, &node, mb, finish = std::move(call.finish)](std::exception_ptr error) -> Values {
      return naming(node, steps_[0], mb, [&] { return std::make_shared<const std::vector<Tensor>>(finish(error)); });
    };
    return suspension;
  }

 private:
  // One graph node of the actor.
  struct Step {
    const Member* member;
    const graph::Node* node;
    const graph::OpDef* def;
    std::vector<DType> dtypes;  // the outputs' dtypes, fixed by the graph
    std::uint32_t track = 0;    // its own track when grouped, else 0 (the actor's)
    std::vector<std::pair<int, int>> drops;  // values to let go of once it has run: (member, output), or (-1, input)
  };

  // What an error of member `s` in micro-batch `mb` begins with.
  static std::string failed(const Node& node, const Step& s, int mb) {
    return "op '" + s.member->name + "' failed in step " + std::to_string(node.step()) + ", micro-batch " +
           std::to_string(mb);
  }
  // Runs f; an error it throws names the op, step and micro-batch.
  template <class F>
  auto naming(const Node& node, const Step& s, int mb, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(e.kind(), failed(node, s, mb) + ": " + e.message());
    } catch (const std::exception& e) {
      throw Error(ErrorKind::runtime, failed(node, s, mb) + ": " + e.what());
    }
  }
  // Its inputs: among those `given` to the actor, or what earlier members `made` in this act.
  static std::vector<Tensor> inputs(const Step& s, const std::vector<Tensor>& given,
                                    const std::vector<std::vector<Tensor>>& made) {
    std::vector<Tensor> in;
    for (const MemberInput& ref : s.member->inputs)
      in.push_back(ref.member < 0 ? given[static_cast<std::size_t>(ref.index)]
                                  : made[static_cast<std::size_t>(ref.member)][static_cast<std::size_t>(ref.index)]);
    return in;
  }
  // The outputs' shapes bound to micro-batch `mb`'s sizes.
  std::vector<Shape> output_shapes(const Node& node, const Step& s, int mb) const {
    std::vector<Shape> shapes;
    const graph::SymBindings& bindings = node.ctx().bindings[static_cast<std::size_t>(mb)];
    for (graph::ValueId o : s.node->outputs) shapes.push_back(graph::bind(graph_->value(o).info.shape, bindings));
    return shapes;
  }
  graph::ComputeContext context(const Node& node, const Step& s, int mb, const std::vector<Shape>& shapes) const {
    return graph::ComputeContext{s.node->attrs, shapes, s.dtypes, s.node->label, node.ctx().random[static_cast<std::size_t>(mb)]};
  }

  std::shared_ptr<const graph::Graph> graph_;
  std::vector<Step> steps_;
};

}  // namespace

std::shared_ptr<NodeKind> op_kind(std::shared_ptr<const graph::Graph> graph, const ActorSpec& spec) {
  return std::make_shared<OpKind>(std::move(graph), spec);
}

}  // namespace troupe::actors
