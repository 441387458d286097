#pragma once
// Planning a hybrid-parallel training step: the device mesh of a job (dp data-parallel replicas of
// tp tensor-parallel shards), the Megatron-style placement of a GPT step on it, and the memory
// each device then holds. The logic is CAF-free (src/planning/); the planner actor that searches
// meshes with it builds on this.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// The mesh {"dp", dp} x {"tp", tp} of a job of `world` processes; every device is used
/// (fully_use_devices): dp x tp must equal the world size, or a clear error says so.
graph::Mesh job_mesh(int dp, int tp, int world);

/// The placements to hand propagate_sharding() (graph/sharding.hpp) for a training step.
struct PlacementRequest {
  std::map<graph::ValueId, graph::NdPlacement> given;     // inputs, parameters and pinned values
  std::map<graph::ValueId, graph::NdPlacement> required;  // the step's outputs: loss and gradients
};

/// Megatron's placement of a traced GPT training step (a TracedFunction with gradients whose inputs
/// are [batch, ...] and whose blocks are graph::GPTBlock, named "<...>attn.qkv", "attn.proj",
/// "mlp.fc", "mlp.proj") on a mesh of a "dp" and a "tp" axis: along tp, qkv column-parallel with its
/// rows grouped by head (S(0)x3, weight and bias), the attention's output projection row-parallel,
/// fc column-parallel, the MLP's projection row-parallel, the token embedding (the table a step
/// input is looked up in) and the head (the product giving the cross-entropy's logits)
/// vocab-parallel when tp divides the vocabulary (split by rows: each device looks up its rows'
/// ids, and the cross-entropy exchanges each row's maximum and sums, never the logits),
/// everything else (LayerNorms, position embeddings, the biases after row-parallel products)
/// replicated; the row-parallel products' outputs, the embedding's lookup and the
/// column-parallel products' input gradients all-reduced where they are made (Megatron's g and f). Along dp, the inputs split by batch and the parameters replicated. The
/// loss and every gradient are required replicated along dp (the gradients' all-reduce) and placed
/// like their parameter along tp. With `zero1` (ZeRO stage 1, the article's
/// enable_parallel_optimizer) each gradient is required split along dp instead (a reduce-scatter),
/// on its first dim that divides evenly (within tp's slices; not a dim tp splits in blocks;
/// broadcast when none does), so each dp
/// rank updates its shard of the optimizer state, and the updated parameters are all-gathered.
/// Throws when `heads` does not divide among the tp devices.
PlacementRequest megatron_gpt_placement(const graph::TracedFunction& step, const graph::Mesh& mesh, std::int64_t heads,
                                        bool zero1 = false);

/// `request` (for `mesh`) along the mesh axis called `axis` alone, with a mesh of that axis: what a
/// device runs when the other axes are data-parallel replicas, which the runtime's data
/// parallelism joins (ProgramOptions::data_parallel). Throws when the mesh has no such axis.
std::pair<graph::Mesh, PlacementRequest> project_request(const PlacementRequest& request, const graph::Mesh& mesh,
                                                         const std::string& axis);

/// What one device holds of a planned step, in bytes.
struct PlanMemory {
  double parameters = 0;
  double gradients = 0;         // whole gradients of the device's parameters (ZeRO-1 splits only the state)
  double optimizer_state = 0;  // `optimizer_bytes_per_parameter` times the elements of the gradients the
                               // device updates (a ZeRO-1 shard along dp)
  double activations = 0;      // forward values the backward reads (kept between them)
  /// The sum of the above.
  double total() const { return parameters + gradients + optimizer_state + activations; }
};

/// The memory of device 0 of `plan` for `step` (a TracedFunction with gradients), with the symbolic
/// dims sized by `bindings`; `optimizer_bytes_per_parameter` is 8 for AdamW's two f32 moments.
PlanMemory plan_memory(const graph::TracedFunction& step, const graph::ShardingPlan& plan, const graph::SymBindings& bindings,
                       double optimizer_bytes_per_parameter);

/// What the cost model knows of the machines: compute speed, and each mesh axis' link.
struct CostModel {
  double gflops = 50;                  // per device, at the step's products
  /// Per device, the memory bandwidth (GB/s) the optimizer's update streams at: AdamW reads a
  /// parameter, its gradient and two moments and writes three of them, 28 bytes an element in f32.
  double update_gbps = 20;
  double update_bytes_per_element = 28;
  /// Per mesh axis name: bandwidth in GB/s and latency in microseconds per collective; an axis
  /// not listed uses `default_link`.
  struct Link {
    double gbytes_per_s = 10;
    double latency_us = 20;
  };
  std::map<std::string, Link> links;
  Link default_link;
  /// Links measured for particular meshes (by Mesh::str(), "dp=2 x tp=2"), per axis name: a mesh's
  /// groups run on other links than another mesh's (a tp pair within a host, a ring across hosts).
  /// A mesh listed here takes its axes' links from it before `links`.
  std::map<std::string, std::map<std::string, Link>> mesh_links;
};

// Start-up measurements: measure_link, measure_mesh_links and agree_on_means block their caller
// until the ranks have met, so a job calls them from its own thread before any step runs (the apps
// do, in ParallelJob and search_training_mesh), never from an actor's handler, which must not wait.

/// The link of a group of ranks, measured: the latency of an all-reduce of a few bytes (the median
/// of 20) and the bandwidth each rank sends at in a 4 MiB one (2 (n-1)/n of it; the best of 3). A
/// collective of the communicator's ranks, every one calling it, which all get the ranks' mean (so
/// that they plan the same buckets); about 20 round trips and 12 MiB sent per rank (0.1 s over
/// 1 Gbit/s).
CostModel::Link measure_link(transport::Communicator& comm);

/// Makes a communicator of `members` (job ranks in group order, this rank among them) named
/// `name`: a collective of the whole job, every rank asking for its own group of one partition of
/// the ranks, in the same order.
using GroupMaker = std::function<std::shared_ptr<transport::Communicator>(const std::vector<int>& members, const char* name)>;

/// The links of the "tp" and "dp" axes of the dp x tp meshes of `world`'s ranks with tp in `tps`
/// (rank r is replica r / tp, shard r % tp), each measured on the groups that mesh would run on
/// (measure_link; every group of an axis at once, contending as in training), each figure the mean
/// over the job's ranks: CostModel::mesh_links, by mesh. A collective of `world`'s ranks.
std::map<std::string, std::map<std::string, CostModel::Link>> measure_mesh_links(transport::Communicator& world,
                                                                                 const std::vector<int>& tps,
                                                                                 const GroupMaker& group);

/// The ranks' mean of each of `figures` (a collective of the communicator's ranks, every one calling
/// it): what each rank measured (its link, its GFLOP/s) made one set of figures, so that every rank
/// plans alike.
std::vector<double> agree_on_means(transport::Communicator& comm, const std::vector<double>& figures);

/// The data-parallel buckets for a link: how large a bucket may grow and how large the first is.
struct BucketSizes {
  double fusion_mb = 64, first_mb = 1;
};
/// Buckets whose latency is at most 1% of their transfer (fusion: 99 x latency x bandwidth, within
/// 0.25-64 MiB), so they cost what one large transfer costs while each starts as soon as backward
/// fills it; the first 1 MiB, or the fusion size when smaller. Over shared memory (17 us, 6.4 GB/s)
/// that is 10 MiB; over 1 Gbit/s TCP (95 us, 120 MB/s) 1.1 MiB: the fastest sizes measured on each
/// (docs/PERFORMANCE.md).
BucketSizes choose_buckets(const CostModel::Link& link);


/// A plan's predicted step time on device 0, in seconds.
struct PlanTime {
  double compute = 0;        // each node's FLOPs at CostModel::gflops, divided by the devices it is split over
  double communication = 0;  // each transition's latency plus its bytes at its axis' bandwidth
  double optimizer = 0;      // the update of the parameter elements the device updates, at CostModel::update_gbps
  /// One after the other (the overlap the runtime finds is not counted).
  double total() const { return compute + communication + optimizer; }
};

/// The predicted time of `plan` for `step` (a TracedFunction with gradients), with ZeRO-1's
/// all-gather of each parameter whose gradient is split where the parameter is not.
PlanTime plan_time(const graph::TracedFunction& step, const graph::ShardingPlan& plan, const graph::SymBindings& bindings,
                   const CostModel& cost);

/// One mesh the planner tried for a GPT step, with what it predicts.
struct MeshCandidate {
  int dp = 1, tp = 1;
  PlanTime time;
  PlanMemory memory;
  bool fits = true;  // within the memory budget
};

/// The planner's search for a GPT step (megatron_gpt_placement) on `world` devices: every dp x tp =
/// world with tp dividing `heads` whose placements fit the step (dp dividing the batch), each
/// planned and predicted; returns them all, fastest first
/// among those whose memory fits `memory_budget` bytes per device (0: no budget), then the rest.
/// Throws when none fits, naming the smallest memory a mesh needs.
std::vector<MeshCandidate> search_gpt_meshes(const graph::TracedFunction& step, int world, std::int64_t heads,
                                             const graph::SymBindings& bindings, const CostModel& cost,
                                             double memory_budget, double optimizer_bytes_per_parameter,
                                             bool zero1 = false);

}  // namespace troupe::actors
