#pragma once
// Reverse-mode autodiff. Eager: backward(loss) walks the tape and accumulates into leaf grads.
// Graph: append_backward() emits the backward as nodes of the same graph (flagged `backward`), so
// later passes and the actor runtime see forward and backward alike. Both run the OpDefs' rules.

#include <vector>

#include "troupe/graph/graph.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::graph {

/// Accumulates d(loss)/d(leaf) into grad() of every leaf that loss depends on. `loss` must have one
/// element unless `grad_output` (of loss's shape) is given. Gradients add up over calls, as in
/// PyTorch; zero them between steps.
void backward(const Var& loss, const Tensor& grad_output = Tensor());

/// Appends to `g` the nodes computing d(loss)/d(wrt[i]) and returns those values; -1 where
/// loss does not depend on wrt[i]. A wrt value may be an input, a parameter or a node's output
/// (a pipeline stage's received input). Only nodes on a path from some wrt to loss get a gradient;
/// values used several times accumulate; integer values and stop_gradient block the flow. The
/// backward starts from `seed` (a value of loss's dtype and shape: a loss scale, or the gradient
/// of a pipeline stage's output, which need not be 0-d), or from 1 when seed is -1 (loss: one element).
std::vector<ValueId> append_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed = -1);

}  // namespace troupe::graph
