#pragma once
// Embedding lookup and its scatter-add backward.

#include <cstdint>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Rows of weight [V, D] selected by ids (i32 or i64, any shape): result [..., D].
Tensor embedding(const Tensor& weight, const Tensor& ids);
/// Scatter-adds grad [..., D] into a [num_embeddings, D] tensor at the rows named by ids.
Tensor embedding_backward(const Tensor& grad, const Tensor& ids, std::int64_t num_embeddings);

}  // namespace troupe::kernels
