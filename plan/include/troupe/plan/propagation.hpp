#pragma once
// Sharding propagation: every value of a graph placed on a mesh, from the placements given to its
// leaves and required of its outputs, each node taking the cheapest of its op's sharding
// signatures (OpDef::sharding) and the transitions (collectives) between them inserted.

#include <map>

#include "troupe/graph/sharding.hpp"
#include "troupe/graph/sym_shape.hpp"

namespace troupe::plan {

/// Places every value of `g` on `mesh`. `given` holds the placements of the graph's inputs and
/// parameters (those absent are broadcast) and of any op output the caller pins (brought there
/// right after its producer, as Megatron all-reduces a row-parallel product's output); `required`
/// the placements its outputs must have (those absent keep what propagation gives them). `bindings` sizes the symbolic dims, for the bytes.
/// Nodes are placed in order, each taking, per mesh axis, the signature whose input transitions send
/// the fewest bytes, then change the fewest placements (the op's own order breaks ties). A split that does not divide its dim evenly
/// among the axis's devices is not taken; a given placement that does not fit its value is an
/// error naming the value, its shape, the placement and the mesh.
graph::GraphPlacement propagate_sharding(const graph::Graph& g, const graph::Mesh& mesh,
                                         const std::map<graph::ValueId, graph::NdPlacement>& given,
                                         const std::map<graph::ValueId, graph::NdPlacement>& required,
                                         const graph::SymBindings& bindings);

}  // namespace troupe::plan
