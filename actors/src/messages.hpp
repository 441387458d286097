#pragma once
// The messages actors exchange and the typed interfaces of the actors outside the register protocol.
// Payloads are handles (shared_ptr, Tensor) and small ids (step, micro-batch, register, sink);
// tensor bytes are never copied into a message. Every message ends with the flow id of its traced
// send (tell), so a handler can close the arrow in traces.

#include <caf/all.hpp>

#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bucket_layout.hpp"
#include "grad_compression.hpp"
#include "handler.hpp"
#include "registers.hpp"
#include "zero_shard.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/kernels/stream.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

/// What run_async hands the program actor.
struct RunRequest {
  std::vector<Tensor> inputs;
  StepCallback done;
  kernels::RandomPosition random;  // where the step's random ops draw (Program::run_async)
};
using RunRequestPtr = std::shared_ptr<RunRequest>;

/// One optimizer actor's final gradients of a step (reduced, clipped), by parameter name.
using GradientMapPtr = std::shared_ptr<const std::map<std::string, Tensor>>;

using ready_atom = caf::atom_constant<caf::atom("ready")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using output_atom = caf::atom_constant<caf::atom("output")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using gradient_atom = caf::atom_constant<caf::atom("gradient")>;
using filled_atom = caf::atom_constant<caf::atom("filled")>;
using reduce_atom = caf::atom_constant<caf::atom("reduce")>;
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
using mean_atom = caf::atom_constant<caf::atom("mean")>;
using bucket_atom = caf::atom_constant<caf::atom("bucket")>;
using norm_atom = caf::atom_constant<caf::atom("norm")>;
using clip_atom = caf::atom_constant<caf::atom("clip")>;
using clipped_atom = caf::atom_constant<caf::atom("clipped")>;
using update_atom = caf::atom_constant<caf::atom("update")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;
using go_atom = caf::atom_constant<caf::atom("go")>;
using acted_atom = caf::atom_constant<caf::atom("acted")>;
using gathered_atom = caf::atom_constant<caf::atom("gathered")>;
using summed_atom = caf::atom_constant<caf::atom("summed")>;
using synced_atom = caf::atom_constant<caf::atom("synced")>;
using drained_atom = caf::atom_constant<caf::atom("drained")>;

/// A node (node.hpp): the register protocol's messages, the completion of a suspended act's
/// outside part (a collective), of the stream work its inputs wait for, and ZeRO-1's all-gather
/// of a parameter it reads.
using NodeActor = caf::typed_actor<
    caf::reacts_to<start_atom, StepContextPtr, std::uint64_t>,
    caf::reacts_to<ready_atom, ReadyPtr, std::uint64_t>,
    caf::reacts_to<release_atom, std::uint64_t /*step*/, int /*register*/, std::uint64_t>,
    caf::reacts_to<go_atom, StepContextPtr, int /*micro-batch*/, std::uint64_t>,
    caf::reacts_to<acted_atom, std::uint64_t /*step*/, int /*micro-batch*/, std::exception_ptr /*or null*/, std::uint64_t>,
    caf::reacts_to<synced_atom, std::uint64_t /*step*/, int /*micro-batch*/, std::exception_ptr /*or null*/, std::uint64_t>,
    caf::reacts_to<gathered_atom, std::uint64_t /*step*/, std::exception_ptr /*or null*/, std::uint64_t>>;

/// The program actor: steers steps (program_actor.cpp). It is spawned untyped because its phases
/// are behaviors switched with become, which CAF 0.17 allows typed actors only between complete
/// interfaces; every sender holds this typed handle, so a wrong message to it does not compile.
using ProgramActor = caf::typed_actor<
    caf::reacts_to<run_atom, RunRequestPtr, std::uint64_t>,
    caf::reacts_to<done_atom, std::uint64_t /*step*/, int /*node*/, std::uint64_t>,
    caf::reacts_to<output_atom, std::uint64_t /*step*/, int /*sink*/, Tensor, std::uint64_t>,
    caf::reacts_to<bucket_atom, std::uint64_t /*step*/, int /*bucket*/, double /*squared norm*/, std::uint64_t>,
    caf::reacts_to<reduced_atom, std::uint64_t /*step*/, Tensor /*ranks' mean of the 0-d outputs*/, std::uint64_t>,
    caf::reacts_to<clipped_atom, std::uint64_t /*step*/, double /*global norm*/, std::uint64_t>,
    caf::reacts_to<applied_atom, std::uint64_t /*step*/, int /*optimizer*/, GradientMapPtr, std::uint64_t>,
    caf::reacts_to<gathered_atom, std::uint64_t /*step*/, std::exception_ptr /*or null*/, std::uint64_t>,
    caf::reacts_to<drained_atom, std::uint64_t /*step*/, std::exception_ptr /*or null*/, std::uint64_t>,
    caf::reacts_to<fail_atom, std::uint64_t /*step*/, int /*ErrorKind*/, std::string, std::uint64_t>>;

/// An optimizer actor: collects its parameters' final gradients, scales them by the clip
/// coefficient and updates once the program allows it (optimizer_actor.cpp).
using OptimizerActor = caf::typed_actor<
    caf::reacts_to<gradient_atom, std::uint64_t /*step*/, int /*sink*/, Tensor, std::uint64_t>,
    caf::reacts_to<clip_atom, std::uint64_t /*step*/, double /*scale*/, bool /*skip the update*/, std::uint64_t>,
    caf::reacts_to<update_atom, std::uint64_t /*step*/, std::uint64_t>,
    caf::reacts_to<gathered_atom, std::uint64_t /*step*/, std::exception_ptr /*or null*/, std::uint64_t>>;

/// The clip actor: sums the squared norms (or takes them of the gradients) in a fixed order and
/// tells the optimizers the coefficient (clip_actor.cpp).
using ClipActor = caf::typed_actor<
    caf::reacts_to<norm_atom, std::uint64_t /*step*/, int /*slot*/, double /*squared norm*/, std::uint64_t>,
    caf::reacts_to<gradient_atom, std::uint64_t /*step*/, int /*slot*/, Tensor, std::uint64_t>,
    caf::reacts_to<summed_atom, std::uint64_t /*step*/, double /*squared norm*/, std::exception_ptr /*or null*/,
                   std::uint64_t>>;

/// A bucket actor: counts the gradients written into its slice of the step's buffer, asks for the
/// AllReduce when full and passes the reduced gradients on (bucket_actor.cpp).
using BucketActor = caf::typed_actor<
    caf::reacts_to<filled_atom, StepContextPtr, int /*sink*/, std::uint64_t>,
    caf::reacts_to<reduced_atom, std::uint64_t /*step*/, Tensor /*the reduced buffer*/, std::uint64_t>>;

/// The communicator actor: issues the step's collectives in the one order every rank agrees on
/// (communicator_actor.cpp).
using CommunicatorActor = caf::typed_actor<
    caf::reacts_to<reduce_atom, std::uint64_t /*step*/, int /*bucket*/, Tensor /*flat buffer*/, std::uint64_t>,
    caf::reacts_to<mean_atom, std::uint64_t /*step*/, Tensor /*packed 0-d outputs*/, std::uint64_t>>;

/// Where gradients go once complete; fixed at compile time, read by gradient stages and buckets.
struct GradientPath {
  std::vector<AddressOf<OptimizerActor>> optimizers;  // the actors that update parameters (or only collect)
  std::vector<std::vector<int>> owners;               // per sink: the optimizer actors its gradient goes to
  AddressOf<ClipActor> clip;                          // null actor when the step does not clip
  bool clip_takes_norms = true;                       // parallel clip: squared norms; naive: the gradients
  std::vector<int> clip_slot;                         // per sink: its place among the gradients (-1: an output)
  std::vector<double> norm_weight;                    // per sink: its squared norm's weight in the clipping norm
                                                      // (1/n for a parameter n tensor-parallel devices hold whole)
  std::shared_ptr<const BucketLayout> buckets;          // null without data parallelism
  std::shared_ptr<ZeroShard> zero;                    // ZeRO-1: this rank's slices and their update; null otherwise
  std::shared_ptr<BucketCompressors> compression;     // how the buckets travel, when compressed; null otherwise
  std::vector<AddressOf<BucketActor>> bucket_actors;
  AddressOf<CommunicatorActor> communicator;
};

/// The addresses of all actors of a program, filled before the first message flows.
struct Peers {
  std::vector<AddressOf<NodeActor>> nodes;  // by actor index of the plan
  std::vector<std::shared_ptr<Stream>> streams;  // a stream-ordered program's (ActorSpec::stream)
  AddressOf<ProgramActor> program;
  GradientPath gradients;
  /// Where node `index` of the plan is.
  const AddressOf<NodeActor>& at(int index) const { return nodes[static_cast<std::size_t>(index)]; }
};
using PeersPtr = std::shared_ptr<Peers>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepContextPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReadyPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::RunRequestPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradientMapPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::Tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::exception_ptr)
