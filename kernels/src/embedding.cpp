// The embedding front ends: checks (every id in range), the outputs, dispatch.
#include "troupe/kernels/embedding.hpp"

#include "float_checks.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::kernels {
namespace {

// The ids as dense i64 on `device`, each checked to lie in [0, v). The check reads every id, so it
// runs on a host copy (a CPU tensor is read in place).
Tensor checked_ids(const char* op, const Tensor& ids, std::int64_t v, const Device& device) {
  TROUPE_CHECK(ids.defined(), invalid_argument, op, ": ids is undefined");
  TROUPE_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, dtype_mismatch, op,
               ": ids must be i32 or i64, got ", ids.str());
  Tensor r = ids.to(Device::cpu()).to(DType::i64).contiguous();
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
  return r.to(device);
}

// The table's rows and the kernels' "first" attribute for `slice` of a table whose device holds `held` rows.
std::pair<std::int64_t, Attrs> table_of(const char* op, const TableSlice& slice, std::int64_t held) {
  if (slice.num < 0) return {held, Attrs().set("first", std::int64_t{0})};
  TROUPE_CHECK(slice.first >= 0 && slice.first + held <= slice.num, invalid_argument, op, ": rows [", slice.first, ", ",
               slice.first + held, ") are not a slice of a table of ", slice.num, " rows");
  return {slice.num, Attrs().set("first", slice.first)};
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, TableSlice slice) {
  check_float("embedding", "weight", weight, true);
  TROUPE_CHECK(weight.dim() == 2, shape_mismatch, "embedding: weight must be [V, D], got ",
               shape_str(weight.shape()));
  const auto [num, attrs] = table_of("embedding", slice, weight.shape()[0]);
  Tensor id = checked_ids("embedding", ids, num, weight.device());
  Shape s = ids.shape();
  s.push_back(weight.shape()[1]);
  Tensor y = Tensor::empty(s, weight.dtype(), weight.device());
  std::vector<Tensor> outs{y};
  dispatch("embedding", {weight.contiguous(), id}, outs, attrs);
  return y;
}

Tensor embedding_backward(const Tensor& grad, const Tensor& ids, std::int64_t num_embeddings, TableSlice slice) {
  check_float("embedding_backward", "grad", grad, true);
  TROUPE_CHECK(num_embeddings >= 0, invalid_argument, "embedding_backward: num_embeddings must be >= 0, got ",
               num_embeddings);
  const auto [num, attrs] = table_of("embedding_backward", slice, num_embeddings);
  Tensor id = checked_ids("embedding_backward", ids, num, grad.device());
  Shape expect = ids.shape();
  TROUPE_CHECK(grad.dim() == ids.dim() + 1 && Shape(grad.shape().begin(), grad.shape().end() - 1) == expect,
               shape_mismatch, "embedding_backward: grad shape ", shape_str(grad.shape()),
               " must be ids shape ", shape_str(expect), " + [D]");
  Tensor dw = Tensor::empty({num_embeddings, grad.shape().back()}, grad.dtype(), grad.device());
  std::vector<Tensor> outs{dw};
  dispatch("embedding_backward", {grad.contiguous(), id}, outs, attrs);
  return dw;
}

}  // namespace troupe::kernels
