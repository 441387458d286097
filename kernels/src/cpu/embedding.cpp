// CPU embedding lookup / scatter-add. The front end checks ids (converted to dense i64).

#include "troupe/kernels/embedding.hpp"

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

Tensor checked_ids(const char* op, const Tensor& ids, std::int64_t v) {
  TROUPE_CHECK(ids.defined(), invalid_argument, op, ": ids is undefined");
  TROUPE_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, dtype_mismatch, op,
               ": ids must be i32 or i64, got ", ids.str());
  Tensor r = ids.to(DType::i64).contiguous();
  const std::int64_t* p = r.data<std::int64_t>();
  for (std::int64_t i = 0; i < r.numel(); ++i)
    if (p[i] < 0 || p[i] >= v) {
      Shape pos;
      std::int64_t rem = i;
      pos.assign(ids.shape().size(), 0);
      for (std::size_t k = ids.shape().size(); k-- > 0;) {
        pos[k] = rem % ids.shape()[k];
        rem /= ids.shape()[k];
      }
      fail(ErrorKind::out_of_range, op, ": id ", p[i], " at position ", shape_str(pos),
           " is outside [0, ", v, ") (num_embeddings V = ", v, ")");
    }
  return r;
}

}  // namespace

namespace kernels {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  cpu::check_float("embedding", "weight", weight);
  TROUPE_CHECK(weight.dim() == 2, shape_mismatch, "embedding: weight must be [V, D], got ",
               shape_str(weight.shape()));
  Tensor id = checked_ids("embedding", ids, weight.shape()[0]);
  Shape s = ids.shape();
  s.push_back(weight.shape()[1]);
  Tensor y = Tensor::empty(s, weight.dtype());
  std::vector<Tensor> outs{y};
  dispatch("embedding", {weight.contiguous(), id}, outs);
  return y;
}

Tensor embedding_backward(const Tensor& grad, const Tensor& ids, std::int64_t num_embeddings) {
  cpu::check_float("embedding_backward", "grad", grad);
  TROUPE_CHECK(num_embeddings >= 0, invalid_argument, "embedding_backward: num_embeddings must be >= 0, got ",
               num_embeddings);
  Tensor id = checked_ids("embedding_backward", ids, num_embeddings);
  Shape expect = ids.shape();
  TROUPE_CHECK(grad.dim() == ids.dim() + 1 && Shape(grad.shape().begin(), grad.shape().end() - 1) == expect,
               shape_mismatch, "embedding_backward: grad shape ", shape_str(grad.shape()),
               " must be ids shape ", shape_str(expect), " + [D]");
  Tensor dw = Tensor::empty({num_embeddings, grad.shape().back()}, grad.dtype());
  std::vector<Tensor> outs{dw};
  dispatch("embedding_backward", {grad.contiguous(), id}, outs);
  return dw;
}

}  // namespace kernels
}  // namespace troupe
