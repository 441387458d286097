#pragma once
// The messages actors exchange. Payloads are handles (shared_ptr, Tensor) and small ids (step,
// micro-batch, register); tensor bytes are never copied into a message.

#include <caf/all.hpp>

#include <memory>
#include <string>
#include <vector>

#include "troupe/actors/program.hpp"
#include "troupe/graph/sym_shape.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

/// Everything a step shares between its actors, created once per step by the program actor.
struct StepContext {
  std::uint64_t step = 0;
  int micro_batches = 1;
  std::vector<std::vector<Tensor>> inputs;  // [micro-batch][graph input]
  std::vector<Tensor> parameters;           // in the order of the graph's parameters
  graph::SymBindings bindings;              // symbol sizes of one micro-batch
};
using StepContextPtr = std::shared_ptr<const StepContext>;

/// A register of a producer became readable: it holds `values` (the producer's outputs) for `mb`.
struct Ready {
  StepContextPtr ctx;
  int producer = 0;  // actor index of the sender
  int mb = 0;
  int reg = 0;
  std::shared_ptr<const std::vector<Tensor>> values;
  std::uint64_t flow = 0;  // tracer flow id
};
using ReadyPtr = std::shared_ptr<const Ready>;

/// What run_async hands the program actor.
struct RunRequest {
  std::vector<Tensor> inputs;
  StepCallback done;
};
using RunRequestPtr = std::shared_ptr<RunRequest>;

/// The handles of all actors of a program, filled before the first message flows.
struct Peers {
  std::vector<caf::actor> actors;  // by actor index
  caf::actor program;
  std::vector<std::uint32_t> trace_ids;  // by actor index; the program actor's is last
};
using PeersPtr = std::shared_ptr<Peers>;

/// Gradients handed to one optimizer actor at the end of a step, by parameter name.
using GradientMapPtr = std::shared_ptr<const std::map<std::string, Tensor>>;

using ready_atom = caf::atom_constant<caf::atom("ready")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using result_atom = caf::atom_constant<caf::atom("result")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepContextPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReadyPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::RunRequestPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradientMapPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::Tensor)
