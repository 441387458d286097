#pragma once
// The planner's cost and memory model: what a device holds of a placed training step, and how
// long the step takes on it, from each op's declared cost (OpDef::cost) and the mesh's links.

#include <map>
#include <string>

#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::plan {

/// What one device holds of a planned step, in bytes.
struct DeviceMemory {
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
DeviceMemory device_memory(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
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

/// This device's GFLOP/s at a 256 x 256 f32 product, the size of the GPT steps' products (the best
/// of five rounds of 20 after a warm-up), for CostModel::gflops; about 0.1 s.
double measure_gflops();
/// This device's bandwidth at AdamW's update in GB/s of the 28 bytes an element it streams (the
/// best of five updates of 4M elements, larger than the caches), for CostModel::update_gbps.
double measure_update_gbps();

/// A plan's predicted step time on device 0, in seconds.
struct StepTime {
  double compute = 0;        // each node's FLOPs at CostModel::gflops, divided by the devices it is split over
  double communication = 0;  // each transition's latency plus its bytes at its axis' bandwidth
  double optimizer = 0;      // the update of the parameter elements the device updates, at CostModel::update_gbps
  /// One after the other (the overlap the runtime finds is not counted).
  double total() const { return compute + communication + optimizer; }
};

/// The predicted time of `plan` for `step` (a TracedFunction with gradients), with ZeRO-1's
/// all-gather of each parameter whose gradient is split where the parameter is not.
StepTime step_time(const graph::TracedFunction& step, const graph::GraphPlacement& plan, const graph::SymBindings& bindings,
                   const CostModel& cost);

}  // namespace troupe::plan
