#pragma once
// Lowering a traced graph to an actor plan, without CAF: which actors exist, what each runs and
// reads, and whom it feeds. The program spawns one CAF actor per entry.

#include <string>
#include <vector>

#include "troupe/graph/graph.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::actors {

/// Where one input of an actor comes from.
struct InputRef {
  enum class From { producer, parameter, constant } from = From::producer;
  int producer = -1;  // actor index, for From::producer
  int output = 0;     // index in the producer's register
  int parameter = -1; // for From::parameter
  Tensor constant;    // for From::constant
};

/// Where an input of a graph node an op actor runs comes from: the actor's input `index`
/// (ActorSpec::inputs), or output `index` of an earlier member of the same actor.
struct MemberInput {
  int member = -1;  // -1: the actor's input
  int index = 0;
};

/// One graph node an op actor runs.
struct Member {
  graph::NodeId node = -1;
  std::string name;                 // "matmul %12": its track in traces, and what errors name
  std::vector<MemberInput> inputs;  // one per node input
};

/// One actor of the plan.
struct ActorSpec {
  enum class Kind { input, op, sink } kind = Kind::op;
  std::string name;             // track name in traces and errors ("matmul %12", "grad:w1", "add %7 +3")
  std::vector<Member> members;  // op actors: the graph nodes one act runs, in order (one unless grouped)
  std::vector<std::pair<int, int>> outputs;  // op actors: (member, output) of each value its register carries
  std::vector<InputRef> inputs; // op and sink actors
  std::vector<int> producers;   // distinct actors it waits for (the input actor when it needs a trigger)
  std::vector<int> consumers;   // distinct actors it feeds
  int sink = -1;                // for sinks: index among the sinks, in graph output order
  bool average = false;         // sinks: row-weighted average over micro-batches (gradients, 0-d outputs) or concat
  bool gradient = false;        // sinks: a parameter's gradient (the clip path takes its norm)
  int stream = -1;              // op actors of a stream-ordered program: the stream their kernels are
                                // queued on (assign_streams); -1: they run on the actor's thread
};

/// A node the program computes once per step, before the micro-batches flow, instead of once per
/// micro-batch in an actor: a cast of a parameter (mixed precision's low-precision weights), never
/// a graph output.
struct StepNode {
  graph::NodeId node = -1;
  std::vector<int> inputs;  // where its inputs are among the step's parameters and step values
};

/// The lowered graph. Actor 0 is the input actor; op actors follow in node order; sinks last.
struct ActorGraph {
  std::vector<ActorSpec> actors;
  /// In node order. Step node k's output is read like a parameter, at index (parameter count + k).
  std::vector<StepNode> step_nodes;
  std::vector<int> sinks;        // actor index of each graph output's sink
  std::vector<int> sink_param;   // per sink: parameter index of a gradient output, or -1
  std::vector<int> collectives;  // op actors that meet the other devices of a group (OpDef::collective; not
                                 // point_to_point), in node order
  int op_count = 0;              // op actors
};

/// How graph nodes become op actors.
struct Grouping {
  /// Off: one actor per node. On: a node that is not a product (ops whose cost counts arithmetic:
  /// products, convolutions, attention) joins the actor of the node before it when that actor is
  /// the last one it reads and everything else it reads is upstream of it, so a chain of cheap
  /// ops pays one message and one hand-over between threads instead of one per op. Collectives
  /// always keep an actor of their own.
  bool cheap_ops = true;
  /// Products join too: for inference with one micro-batch in flight, where nothing pipelines
  /// along a chain and the products mostly follow each other. (A training step's backward has
  /// products side by side, each weight's gradient beside its input's, which are faster apart.)
  bool products = false;
};

/// Lowers `fn`'s graph. Inference-only graphs work too (no gradient sinks).
ActorGraph lower_to_actors(const graph::TracedFunction& fn, const Grouping& grouping = {});

/// A pipeline stage's zero-bubble order (ZB-H1; ProgramOptions::defer_weight_gradients): the op
/// actors of the backward that the gradient of the stage's received input does not need (the
/// weight gradients) wait for the act sending that gradient (the backward's pipe_send), so the
/// previous stage gets it first and they fill the wait for the next one. Each such actor none of
/// whose producers is one takes the send's actor as a producer (its token a trigger, as the input
/// actor is for actors that read no producer). A graph without that send (the first stage) is
/// left as it is.
void defer_weight_gradients(ActorGraph& plan, const graph::Graph& g);

/// Stream-ordered execution on `streams` streams (ProgramOptions::streams): the op actors take
/// them in turn, in node order, except collectives and actors running an op that reads values
/// on the host (OpDef::host_reads), which act on their own thread once their inputs are complete.
void assign_streams(ActorGraph& plan, const graph::Graph& g, int streams);

}  // namespace troupe::actors
