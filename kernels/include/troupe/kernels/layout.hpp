#pragma once
// Ops that only move elements: concat/split along an axis and pixel shuffle/unshuffle.

#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// Joins tensors of equal shape except along `axis` into a new tensor (same dtype for all).
Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis);
/// Views of consecutive pieces of x along `axis`, of the given sizes (which must sum to the dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t axis);
/// [N, C*r*r, H, W] -> [N, C, H*r, W*r] (torch.nn.PixelShuffle); returns a dense tensor.
Tensor pixel_shuffle(const Tensor& x, std::int64_t r);
/// [N, C, H*r, W*r] -> [N, C*r*r, H, W]: the inverse of pixel_shuffle, and its backward.
Tensor pixel_unshuffle(const Tensor& x, std::int64_t r);

}  // namespace troupe::kernels
