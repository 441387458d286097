#pragma once
// Ops that keep or drop elements by position or value: the causal attention mask and the gradient
// of max (which routes the incoming gradient to the maxima).

#include "troupe/kernels/tensor.hpp"

namespace troupe::kernels {

/// x[..., i, j] for j <= i, `fill` above the diagonal (the last two dims must be square).
Tensor causal_mask(const Tensor& x, double fill);
/// Gradient of max over some axes: grad (keepdim shape) goes to the elements of x equal to y (keepdim
/// max), split evenly between ties; result has x's shape.
Tensor max_backward(const Tensor& grad, const Tensor& x, const Tensor& y);

}  // namespace troupe::kernels
