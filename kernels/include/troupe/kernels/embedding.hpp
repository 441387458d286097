#pragma once
// Embedding lookup and its scatter-add backward.

#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// The rows of a table one device holds (Megatron's vocab-parallel embedding): rows [first,
/// first + rows held) of a table of `num` rows; ids must lie in [0, num).
struct TableSlice {
  std::int64_t first = 0;
  std::int64_t num = -1;  // -1: the rows held are the whole table
};

/// Rows of weight [V, D] selected by ids (i32 or i64, any shape): result [..., D]. With a `slice`,
/// weight holds that slice of the table and ids naming rows outside it give zero rows.
Tensor embedding(const Tensor& weight, const Tensor& ids, TableSlice slice = {});
/// Scatter-adds grad [..., D] into a [num_embeddings, D] tensor at the rows named by ids. With a
/// `slice`, the result is that slice of the table's gradient (num_embeddings rows from
/// slice.first) and ids outside it add nothing.
Tensor embedding_backward(const Tensor& grad, const Tensor& ids, std::int64_t num_embeddings, TableSlice slice = {});

}  // namespace troupe::kernels
