// CPU embedding lookup / scatter-add. The front end checks ids (converted to dense i64).

#include <algorithm>

#include "cpu/float_kernels.hpp"

namespace troupe {
namespace {

// in: weight [V, D], ids i64 dense; out: y [n, D].
template <class T>
void embedding_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* w = in[0].data<T>();
  const std::int64_t* id = in[1].data<std::int64_t>();
  T* y = out[0].data<T>();
  const std::int64_t d = in[0].shape()[1], n = in[1].numel();
  for (std::int64_t i = 0; i < n; ++i) std::copy(w + id[i] * d, w + (id[i] + 1) * d, y + i * d);
}
TROUPE_REGISTER_FLOAT_KERNELS("embedding", embedding_kernel);

// in: grad [n*D] dense, ids i64 dense; out: dw [V, D] (zeroed here).
template <class T>
void embedding_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const T* g = in[0].data<T>();
  const std::int64_t* id = in[1].data<std::int64_t>();
  T* dw = out[0].data<T>();
  const std::int64_t d = out[0].shape()[1], n = in[1].numel();
  std::fill(dw, dw + out[0].numel(), T(0));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) dw[id[i] * d + j] += g[i * d + j];
}
TROUPE_REGISTER_FLOAT_KERNELS("embedding_backward", embedding_backward_kernel);

}  // namespace
}  // namespace troupe
