// The point-to-point ops of a pipelined step (graph/pipeline_stage.hpp): a send and a receive
// between the two devices of a channel, each a call in three parts (OpDef::collective) so the
// runtime never waits for the wire. They are collectives of two devices that keep their own
// order (OpDef::point_to_point): each channel carries one direction of one stage boundary, and
// both ends act on the micro-batches in order. No gradients: a stage's step wires its backward's
// sends and receives itself (TracedFunction::with_stage_gradients).
#include "collective_call.hpp"
#include "op_helpers.hpp"
#include "troupe/graph/pipeline_stage.hpp"

namespace troupe::graph {

namespace {
using namespace detail;

// The other device of the node's channel, which has two.
int peer_of(const ComputeContext& c) {
  const std::shared_ptr<CollectiveGroup> group = collective_group(static_cast<int>(c.attrs.get_int("group")));
  TROUPE_CHECK(group->size() == 2, invalid_argument, "a pipeline channel joins two devices, and ", group->name(), " has ",
               group->size());
  return 1 - group->rank();
}

// What crosses the wire: the value sent, or the buffer received into.
struct Crossing {
  Tensor value;
  int peer = 0;
};

CollectiveCall start_pipe_send(const std::vector<Tensor>& in, const ComputeContext& c) {
  return call_on_group(
      "pipe_send", c, Crossing{in[0].contiguous(), peer_of(c)},
      [](CollectiveWire& w, const Crossing& s) { w.send(s.value, s.peer); },
      [](Crossing) { return std::vector<Tensor>{Tensor::scalar(0.0, DType::f32)}; });
}

CollectiveCall start_pipe_recv(const std::vector<Tensor>&, const ComputeContext& c) {
  return call_on_group(
      "pipe_recv", c, Crossing{Tensor::empty(c.output_shapes[0], c.output_dtypes[0]), peer_of(c)},
      [](CollectiveWire& w, const Crossing& s) { w.recv(s.value, s.peer); },
      [](Crossing s) { return std::vector<Tensor>{std::move(s.value)}; });
}

std::vector<ValueInfo> infer_pipe_send(const InferContext& c) {
  expect_arity(c, 1, 1);
  return one(DType::f32, {});
}

// The dtype is the node's own, not its input's: mixed precision may cast the stand-in it reads
// for its shape, and what arrives is what the sending stage computed.
std::vector<ValueInfo> infer_pipe_recv(const InferContext& c) {
  expect_arity(c, 1, 1);
  return one(static_cast<DType>(c.attrs.get_int("dtype")), c.inputs[0].shape);
}

}  // namespace

Var pipe_send(const Var& x, int group) { return apply1("pipe_send", {x}, Attrs().set("group", static_cast<std::int64_t>(group))); }

Var pipe_recv(const Var& like, int group) {
  return apply1("pipe_recv", {like},
                Attrs().set("group", static_cast<std::int64_t>(group)).set("dtype", static_cast<std::int64_t>(like.dtype())));
}

// x to the other device of the channel; a 0-d zero once sent.
TROUPE_DEFINE_OP({.name = "pipe_send", .infer = infer_pipe_send, .cost = moves_only, .collective = start_pipe_send,
                  .point_to_point = true, .no_grad_inputs = {0}, .side_effects = true});
// A value of like's shape and of the node's dtype (like's when built) from the other device of the channel.
TROUPE_DEFINE_OP({.name = "pipe_recv", .infer = infer_pipe_recv, .cost = moves_only, .collective = start_pipe_recv,
                  .point_to_point = true, .no_grad_inputs = {0}, .side_effects = true});

}  // namespace troupe::graph
