#pragma once
// Lowering a traced graph to an actor plan, without CAF: which actors exist, what each reads and
// whom it feeds. The program spawns one CAF actor per entry.

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

/// One actor of the plan.
struct ActorSpec {
  enum class Kind { input, op, sink } kind = Kind::op;
  std::string name;             // track name in traces and errors ("matmul %12", "grad:w1")
  graph::NodeId node = -1;      // for op actors
  std::vector<InputRef> inputs; // op and sink actors
  std::vector<int> producers;   // distinct actors it waits for (the input actor when it needs a trigger)
  std::vector<int> consumers;   // distinct actors it feeds
  int sink = -1;                // for sinks: index among the sinks, in graph output order
  bool average = false;         // sinks: row-weighted average over micro-batches (gradients, 0-d outputs) or concat
  bool gradient = false;        // sinks: a parameter's gradient (the clip path takes its norm)
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
  std::vector<int> collectives;  // op actors that meet other devices (OpDef::collective), in node order
  int op_count = 0;
};

/// Lowers `fn`'s graph. Inference-only graphs work too (no gradient sinks).
ActorGraph lower_to_actors(const graph::TracedFunction& fn);

}  // namespace troupe::actors
