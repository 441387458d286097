#pragma once
// The parallel flags of the training apps, which become one actors::ParallelConfig: data
// parallelism (--dp, --comm-fusion-mb, --check-grads; both apps) and troupe-gpt's hybrid
// parallelism (--tp, --zero, the planner's figures, strategy files, --plan-only).

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace troupe::apps {

/// The parallel flags of a training app.
struct ParallelFlags {
  int dp = 1;
  double comm_fusion_mb = 0;   // AllReduce bucket size limit; 0: chosen from the dp group's measured link
  std::string grad_compression = "none";  // none, bf16, powersgd:R or auto (actors::GradCompression)
  bool check_grads = false;    // compare the ranks' post-reduce gradient norms every step
  bool plan_only = false;
  int tp = 0;                  // 0: not given (1, or searched in a launched job)
  int zero = 0;                // ZeRO stage (0 or 1)
  int pp = 1;                  // pipeline stages per replica
  std::vector<int> pp_layers;  // the layers of each stage (empty: as even as they split)
  std::string pp_schedule = "1f1b";  // gpipe, 1f1b or zb-h1 (actors::PipelineSchedule)
  int devices = 0;             // --plan-only: 0: dp x tp (or dp when searching)
  double mem_per_rank = 0;     // bytes; 0: no budget
  double link_gbps = 10, link_latency_us = 20;      // --plan-only: the devices' links, for the cost model
  double tp_link_gbps = 0, tp_link_latency_us = 0;  // --plan-only: the tp axis' link when it differs; 0: the same
  double gflops = 0;           // each device's speed for the cost model; 0: measured here
  double update_gbps = 0;      // each device's bandwidth for the optimizer's update; 0: measured here
  std::string strategy_save, strategy_load;
};

/// Adds --dp, --comm-fusion-mb, --grad-compression and --check-grads to `app`.
void add_data_parallel_flags(CLI::App& app, ParallelFlags& f);
/// Adds --tp, --pp, --pp-layers, --pp-schedule, --zero, --plan-only, --devices, --mem-per-rank,
/// the link and speed figures, --strategy-save and --strategy-load to `app`.
void add_hybrid_parallel_flags(CLI::App& app, ParallelFlags& f);

}  // namespace troupe::apps
