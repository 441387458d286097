#pragma once
// The messages actors exchange. Payloads are handles (shared_ptr, Tensor) and small ids (step,
// micro-batch, register); tensor bytes are never copied into a message.

#include <caf/all.hpp>

#include <memory>
#include <string>
#include <vector>

#include "handler.hpp"
#include "registers.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

/// What run_async hands the program actor.
struct RunRequest {
  std::vector<Tensor> inputs;
  StepCallback done;
};
using RunRequestPtr = std::shared_ptr<RunRequest>;

/// The addresses of all actors of a program, filled before the first message flows.
struct Peers {
  std::vector<Address> nodes;  // by actor index of the plan
  Address program;
  /// Where node `index` of the plan is.
  const Address& at(int index) const { return nodes[static_cast<std::size_t>(index)]; }
};
using PeersPtr = std::shared_ptr<Peers>;

/// Gradients handed to one optimizer actor at the end of a step, by parameter name.
using GradientMapPtr = std::shared_ptr<const std::map<std::string, Tensor>>;

/// The gradients of one reduced bucket, in the bucket's entry order.
using TensorListPtr = std::shared_ptr<const std::vector<Tensor>>;

using ready_atom = caf::atom_constant<caf::atom("ready")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using result_atom = caf::atom_constant<caf::atom("result")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;  // communicator -> bucket / program
using bucket_atom = caf::atom_constant<caf::atom("bucket")>;    // bucket -> program

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepContextPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReadyPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::RunRequestPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradientMapPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::TensorListPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::Tensor)
