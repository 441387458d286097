#pragma once
// Sharding rules shared by several op families (OpDef::sharding; graph/sharding.hpp). Each returns
// the signatures along one mesh axis besides all-broadcast, which every op has. Rules of one op
// alone live next to its definition.

#include <vector>

#include "troupe/graph/sharding.hpp"

namespace troupe::graph::detail {

/// Elementwise over broadcast inputs: output 0's dims may each be split, each input then split
/// along the dim it aligns with, or broadcast where it lacks that dim or has size 1 there; every
/// output (of output 0's rank) is split alike.
std::vector<ShardSignature> shard_pointwise(const ShardContext& c);
/// shard_pointwise, and partial sums in and out: ops linear in all inputs together (add, sub).
std::vector<ShardSignature> shard_additive(const ShardContext& c);
/// shard_pointwise, and a partial sum through input 0 with the other inputs broadcast: ops linear
/// in input 0 (scaling, division by a broadcast value, the gradient pairs (grad, x) of unary ops).
std::vector<ShardSignature> shard_linear_in_first(const ShardContext& c);
/// shard_pointwise, and a partial sum through either input with the other broadcast (mul).
std::vector<ShardSignature> shard_product(const ShardContext& c);
/// Every input and output split alike along any dim but the one of attribute "axis" (negative:
/// from the end): ops that keep whole rows along it (softmax) or cut or join along it (split, concat).
std::vector<ShardSignature> shard_all_but_axis(const ShardContext& c);
/// Ops computing each row of their first `row_inputs` inputs on its own, a row being the last
/// `row_dims` dims (softmax over the last axis, layer norm, attention): any leading dim may be
/// split, the row inputs split alike and the other inputs (weights) broadcast; the outputs, of
/// input 0's rank or of its leading dims alone (per-row statistics), are split alike.
std::vector<ShardSignature> shard_rows(const ShardContext& c, int row_dims, int row_inputs);

// Megatron's vocab-parallel ops (ShardSignature::expand; ops/vocab_parallel.cpp), for a vocabulary
// split evenly along one mesh axis alone.

/// embedding (table [V_l, D], ids): the device's rows of the table looked up, zero rows for ids
/// outside them (a partial sum).
std::vector<ValueId> expand_vocab_embedding(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs);
/// embedding_backward (grad, ids): the device's rows of the table's gradient.
std::vector<ValueId> expand_vocab_embedding_backward(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs);
/// cross_entropy (logits [..., C_l], targets): the rows' maximum all-gathered, their parts
/// (kernels::cross_entropy_parts) all-reduced, the whole loss on every device.
std::vector<ValueId> expand_vocab_cross_entropy(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs);
/// cross_entropy_backward (dloss, logits [..., C_l], targets): the maximum and parts as in the
/// forward, then the gradient of the device's columns.
std::vector<ValueId> expand_vocab_cross_entropy_backward(LocalGraph& g, const std::vector<ValueId>& in, const Attrs& attrs);

}  // namespace troupe::graph::detail
