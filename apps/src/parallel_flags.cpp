#include "troupe/apps/parallel_flags.hpp"

#include "troupe/apps/cli.hpp"

namespace troupe::apps {

void add_data_parallel_flags(CLI::App& app, ParallelFlags& f) {
  app.add_option("--dp", f.dp, "data-parallel ranks (run under troupe-launch -n N, mpirun or Slurm)")
      ->capture_default_str()->check(in_range(1, 1024));
  app.add_option("--comm-fusion-mb", f.comm_fusion_mb,
                 "AllReduce bucket size limit in MiB (0: chosen from the data-parallel ranks' link, measured at start)")
      ->capture_default_str()->check(open_range(0, 1 << 20, "MiB"));
  app.add_option("--grad-compression", f.grad_compression,
                 "how gradient buckets travel: none, bf16 (half the bytes), powersgd:R (rank-R factors of each "
                 "matrix gradient, with error feedback, after 10 whole steps; powersgd:R:W after W) or auto (per "
                 "bucket, once 5 steps measured what backward hides)")
      ->capture_default_str();
  app.add_flag("--check-grads", f.check_grads, "compare the ranks' post-reduce gradient norms every step and warn when they differ");
}

void add_hybrid_parallel_flags(CLI::App& app, ParallelFlags& f) {
  app.add_option("--tp", f.tp, "tensor-parallel ranks per data-parallel replica (Megatron style; searched when absent)")
      ->check(in_range(1, 1024));
  app.add_option("--pp", f.pp, "pipeline stages per data-parallel replica, each a contiguous run of the model's layers")
      ->capture_default_str()->check(in_range(1, 1024));
  app.add_option("--pp-layers", f.pp_layers, "the layers of each pipeline stage, e.g. 3,3,2 (default: as even as they split)")
      ->delimiter(',')->check(in_range(0, 1 << 20));
  app.add_option("--pp-schedule", f.pp_schedule, "how the stages take the micro-batches: 1f1b (stage i holds at most pp - i "
                 "micro-batches' activations), zb-h1 (1f1b with each backward's weight gradients after its input "
                 "gradient is sent) or gpipe (all of them in flight)")
      ->capture_default_str()->check(CLI::IsMember({"1f1b", "zb-h1", "gpipe"}));
  app.add_flag("--plan-only", f.plan_only,
               "print the hybrid-parallel plan (placements, collectives, memory per rank, predicted step time) as JSON, "
               "and do not train");
  app.add_option("--zero", f.zero, "ZeRO stage: 1 shards the optimizer state over the data-parallel ranks")
      ->capture_default_str()->check(CLI::IsMember({0, 1}));
  app.add_option("--devices", f.devices, "devices to plan for with --plan-only (default: dp x tp)")->check(in_range(1, 65536));
  app.add_option("--mem-per-rank", f.mem_per_rank, "memory budget per rank in bytes, for the planner (0: none)")
      ->capture_default_str()->check(in_range(0, 1e15));
  app.add_option("--link-gbps", f.link_gbps, "the ranks' link bandwidth in GB/s, for the planner's cost model")
      ->capture_default_str()->check(open_range(0, 1e6, "GB/s"));
  app.add_option("--link-latency-us", f.link_latency_us, "the ranks' link latency per collective in microseconds")
      ->capture_default_str()->check(in_range(0, 1e7));
  app.add_option("--tp-link-gbps", f.tp_link_gbps,
                 "the tp ranks' link in GB/s when it differs from --link-gbps (tensor parallelism within a host; 0: the same)")
      ->capture_default_str()->check(in_range(0, 1e6));
  app.add_option("--tp-link-latency-us", f.tp_link_latency_us, "the tp ranks' link latency per collective (0: --link-latency-us)")
      ->capture_default_str()->check(in_range(0, 1e7));
  app.add_option("--gflops", f.gflops, "each device's GFLOP/s for the planner's cost model (0: measured on this machine)")
      ->capture_default_str()->check(in_range(0, 1e9));
  app.add_option("--update-gbps", f.update_gbps,
                 "each device's memory bandwidth in GB/s for the optimizer's update, for the cost model (0: measured here)")
      ->capture_default_str()->check(in_range(0, 1e6));
  app.add_option("--strategy-save", f.strategy_save, "write the chosen plan to this strategy file (JSON)");
  app.add_option("--strategy-load", f.strategy_load, "take the plan from this strategy file instead of planning")
      ->excludes(app.get_option("--strategy-save"));
}

}  // namespace troupe::apps
