#pragma once
// Megatron's placement of a GPT training step: the GPT model's policy for tensor parallelism,
// which the planner, strategy files and a ParallelTraining are given (troupe/plan/placement.hpp).

#include <cstdint>

#include "troupe/plan/placement.hpp"

namespace troupe::models {

/// Megatron's placement of a traced GPT training step (a TracedFunction with gradients whose inputs
/// are [batch, ...] and whose blocks are graph::GPTBlock, named "<...>attn.qkv", "attn.proj",
/// "mlp.fc", "mlp.proj") on a mesh of a "dp" and a "tp" axis: along tp, qkv column-parallel with its
/// rows grouped by head (S(0)x3, weight and bias), the attention's output projection row-parallel,
/// fc column-parallel, the MLP's projection row-parallel, the token embedding (the table a step
/// input is looked up in) and the head (the product giving the cross-entropy's logits)
/// vocab-parallel when tp divides the vocabulary (split by rows: each device looks up its rows'
/// ids, and the cross-entropy exchanges each row's maximum and sums, never the logits),
/// everything else (LayerNorms, position embeddings, the biases after row-parallel products)
/// replicated; the row-parallel products' outputs, the embedding's lookup and the column-parallel
/// products' input gradients all-reduced where they are made (Megatron's g and f). Along dp, the
/// inputs split by batch and the parameters replicated. The loss and every gradient are required
/// replicated along dp (the gradients' all-reduce) and placed like their parameter along tp. With
/// `zero1` (ZeRO stage 1, the article's enable_parallel_optimizer) each gradient is required split
/// along dp instead (a reduce-scatter), on its first dim that divides evenly (within tp's slices;
/// not a dim tp splits in blocks; broadcast when none does), so each dp rank updates its shard of
/// the optimizer state, and the updated parameters are all-gathered. Throws when `heads` does not
/// divide among the tp devices.
plan::PlacementRequest megatron_gpt_placement(const graph::TracedFunction& step, const graph::Mesh& mesh,
                                              std::int64_t heads, bool zero1 = false);

/// megatron_gpt_placement as the policy of a GPT of `heads` attention heads: it splits among tp
/// devices that divide the heads.
plan::PlacementPolicy megatron_gpt_policy(std::int64_t heads);

}  // namespace troupe::models
