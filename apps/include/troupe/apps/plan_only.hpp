#pragma once
// troupe-gpt --plan-only: prints and writes as JSON the plan of a GPT training step without
// training (docs/PARALLELISM.md): the mesh (given by --dp and --tp, searched when --tp is absent,
// or read from --strategy-load), each op's placement, each collective with its bytes and mesh
// axis, the memory per device and the predicted step time; with --pp, each stage's layers,
// memory and share of the predicted step (plan/pipeline_cost.hpp).

#include <cstdint>
#include <string>

#include "troupe/apps/parallel_flags.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/plan/mesh_search.hpp"

namespace troupe::apps {

/// Plans the training step of `model` at a global batch of `batch` x --dp sequences (--batch per
/// rank of --dp, as training reads them) in `micro_batches` per replica; prints the plan and its
/// JSON line; returns the exit code.
int plan_only(const ParallelFlags& f, const models::GptConfig& model, std::int64_t batch, std::uint64_t seed,
              int micro_batches = 1);

/// "candidate dp=2 x tp=1: predicted 1.234 ms, 5.67 MiB per rank", as the planner's choices are printed.
std::string describe_candidate(const plan::MeshCandidate& c);

}  // namespace troupe::apps
