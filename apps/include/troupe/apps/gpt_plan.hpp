#pragma once
// troupe-gpt's hybrid-parallel planning (docs/PARALLELISM.md): --plan-only prints and writes as JSON
// the plan of a GPT training step without training (the mesh, given by --dp and --tp, searched when
// --tp is absent, or read from --strategy-load; each op's placement, each collective with its bytes
// and mesh axis, the memory per device, the predicted step time); a launched training job given
// neither --dp nor --tp has its mesh searched; a training rank's plan along its tp axis.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "troupe/plan/link.hpp"
#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::apps {

/// The hybrid-parallel flags of troupe-gpt.
struct PlanFlags {
  bool plan_only = false;
  int tp = 0;                  // 0: searched
  int zero = 0;                // ZeRO stage (0 or 1)
  int devices = 0;             // 0: dp x tp (or dp when searching)
  double mem_per_rank = 0;     // bytes; 0: no budget
  double link_gbps = 10, link_latency_us = 20;  // of the devices' links, for the cost model
  double tp_link_gbps = 0, tp_link_latency_us = 0;  // the tp axis' link when it differs (tp within a host); 0: the same
  double gflops = 0;                           // each device's speed for the cost model; 0: measured here
  double update_gbps = 0;                      // each device's bandwidth for the optimizer's update; 0: measured here
  std::string strategy_save, strategy_load;
};

/// Adds --tp, --zero, --plan-only, --devices, --mem-per-rank, --link-gbps, --link-latency-us,
/// --strategy-save and --strategy-load to `app`.
void add_plan_flags(CLI::App& app, PlanFlags& f);

/// The plan a rank of a `dp` x `tp` training job runs (`batch` sequences per data-parallel rank):
/// Megatron's placement of the traced `step` (a GPT of `heads` heads), or --strategy-load's, along
/// the tp axis; the dp axis is the runtime's data parallelism (and ZeRO-1 with --zero 1). With
/// --strategy-save and `write`, also writes the dp x tp plan there.
graph::GraphPlacement gpt_training_plan(const PlanFlags& f, const graph::TracedFunction& step, std::int64_t heads, int dp,
                                      int tp, std::int64_t batch, bool write);

/// The mesh a training job of several ranks runs when neither --dp nor --tp is given: the planner
/// actor's fastest dp x tp of the world's ranks that fits --mem-per-rank, for the traced `step` (a
/// GPT of `heads` heads) at `global_batch` sequences, with tensor parallelism only where
/// `tensor_parallel` (the run's settings allow it) and dp >= 2 with --zero 1. A collective of
/// `world`: each rank's GFLOP/s and update bandwidth (or the flags') and the links of every
/// candidate mesh's groups (measured on groups `group` makes, as that mesh would run them) are
/// averaged over the ranks, so every rank chooses the same mesh. Rank 0 prints the figures, the
/// candidates and the choice.
std::pair<int, int> search_training_mesh(const PlanFlags& f, const graph::TracedFunction& step, std::int64_t heads,
                                         std::int64_t global_batch, transport::Communicator& world,
                                         const plan::GroupMaker& group, bool tensor_parallel);

/// Plans the training step of `model` at a global batch of `batch` x `dp` sequences (--batch per
/// rank of --dp, as training reads them); prints the plan and its JSON line; returns the exit code.
int plan_only(const PlanFlags& f, const models::GptConfig& model, std::int64_t batch, int dp, std::uint64_t seed);

}  // namespace troupe::apps
