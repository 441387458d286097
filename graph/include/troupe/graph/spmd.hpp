#pragma once
// Running a sharding plan (graph/sharding.hpp): each device runs its own graph, the step as it
// applies to the device's slices (single program, multiple data). shard_step() lowers a traced
// step for one device of the mesh: its inputs and parameters take the shapes of their shards,
// reshape targets and split sizes shrink where their dim is split, a mean over split rows is
// scaled to its share, and every change of placement becomes a collective op (all_reduce,
// all_gather, reduce_scatter, on the device's group along that axis) or a local slice. The
// collective ops of one device form a chain (each also reads the one before it), so every device
// issues them in the same order whatever order the runtime runs independent ops in.

#include <vector>

#include "troupe/graph/collectives.hpp"
#include "troupe/graph/sharding.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::graph {

/// What device `index` of `parts` holds of `full` split along `dim` in `blocks` equal blocks: its
/// slice of each block, in block order (Placement::split).
Tensor block_slice(const Tensor& full, int dim, int blocks, int parts, int index);
/// The inverse: the value whose block_slice for device r is `pieces[r]`.
Tensor join_block_slices(const std::vector<Tensor>& pieces, int dim, int blocks);

/// The whole value from every device's block_slice of it (along `dim`, in `blocks`), gathered as
/// one row per device: `rows` is [devices, numel] of pieces of `shape`.
Tensor join_gathered_rows(const Tensor& rows, const Shape& shape, int dim, int blocks);
/// The same from this device's `piece`, all-gathered on `wire` (inside a group's work).
Tensor gather_block_slices(CollectiveWire& wire, const Tensor& piece, int dim, int blocks);

/// `full` as the device at `coords` (one per mesh axis) holds it under `p`: split along each axis
/// that splits it, the axes nested in mesh order (the first outermost); a partial sum all on the
/// axis's device 0 and zeros on the others.
Tensor shard_of(const Tensor& full, const NdPlacement& p, const Mesh& mesh, const std::vector<int>& coords);
/// The value the devices' shards make up under `p`; `shards` in device order (row-major
/// coordinates, the last axis fastest), as shard_of() gives them.
Tensor assemble(const std::vector<Tensor>& shards, const NdPlacement& p, const Mesh& mesh);
/// The coordinates of device `device` on `mesh` (row-major, the last axis fastest).
std::vector<int> mesh_coords(const Mesh& mesh, int device);

/// One device of a mesh: its coordinates and, per mesh axis, the id of its collective group along
/// that axis (graph/collectives.hpp; unused for axes of one device).
struct MeshDevice {
  std::vector<int> coords;
  std::vector<int> groups;
};

/// `step` (a traced function, with gradients or not) as `device` runs it under `plan`: the same
/// signature with each input's shape its shard's, the same outputs placed as the plan leaves them
/// (the gradients like their parameters), and as parameters this device's shards: fresh leaves
/// holding copies of the shards for the trained parameters and the split ones, the step's own
/// Vars for the others (a loss scale). Errors name the value and the placement that cannot run:
/// a split of a symbolic dim whose size is not a known multiple of the devices, an axis splitting
/// a dim an earlier axis splits too when it must be gathered, a partial sum turned into a split of
/// another device's data.
TracedFunction shard_step(const TracedFunction& step, const GraphPlacement& plan, const MeshDevice& device);

}  // namespace troupe::graph
