#pragma once
// Runs a Graph on tensors, node by node in graph order, with the same OpDef computations as eager
// mode. Symbols are bound from the input shapes; each intermediate is released after its last use.
// (The actor runtime runs the same graphs concurrently; this is the sequential reference.)

#include <vector>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

/// Binds the symbols of g's input shapes from `inputs`; throws naming the input, its expected and
/// actual shape when a fixed dim, a rank, a dtype or a repeated symbol does not fit.
SymBindings bind_inputs(const Graph& g, const std::vector<Tensor>& inputs);

/// Evaluates the values `fetch` (default: g.outputs()) from `inputs` (in the order of g.inputs())
/// and `parameters` (in the order of g.parameters()). With `in_place`, an op marked in_place
/// writes its output over an input of the same shape and dtype that no later node reads and no
/// other tensor shares (never a graph input, parameter or constant).
std::vector<Tensor> execute(const Graph& g, const std::vector<Tensor>& inputs, const std::vector<Tensor>& parameters,
                            std::vector<ValueId> fetch = {}, bool in_place = false);

}  // namespace troupe::graph
