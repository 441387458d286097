#include "troupe/kernels/tensor.hpp"

#include <cstring>
#include <sstream>

#include "cpu/convert.hpp"
#include "cpu/strided_loop.hpp"
#include "device_backend.hpp"
#include "troupe/kernels/stream.hpp"

namespace troupe {

Tensor::Tensor(std::shared_ptr<Storage> storage, std::int64_t offset_bytes, Shape shape, Strides strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset_bytes), shape_(std::move(shape)), strides_(std::move(strides)),
      dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device) {
  const std::size_t bytes = shape_nbytes(shape, dtype_size(dtype));
  return Tensor(std::make_shared<Storage>(bytes, device), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, const Device& device) {
  Tensor host = empty(shape, dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<T*>(host.raw_data()), host.numel(), from_double<T>(value));
  });
  return host.to(device);
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

std::int64_t Tensor::size(std::int64_t axis) const { return shape_[normalize_axis(axis, shape_.size(), "size")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  TROUPE_CHECK(defined(), invalid_argument, "raw_data(): the tensor is undefined");
  return static_cast<char*>(storage_->data()) + offset_;
}

namespace {

// Resolves one -1 in `shape` against `numel`; `op` names the caller in errors.
Shape infer_shape(Shape shape, std::int64_t numel, const Shape& from, const char* op) {
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TROUPE_CHECK(infer < 0, invalid_argument, op, ": only one dimension of ", shape_str(shape), " may be -1");
      infer = static_cast<int>(i);
    } else {
      TROUPE_CHECK(shape[i] >= 0, invalid_argument, op, ": invalid size ", shape[i], " in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TROUPE_CHECK(known != 0 && numel % known == 0, shape_mismatch, op, ": cannot infer -1 in ", shape_str(shape),
                 " for a tensor of shape ", shape_str(from));
    shape[infer] = numel / known;
    known *= shape[infer];
  }
  TROUPE_CHECK(known == numel, shape_mismatch, op, ": cannot view a tensor of shape ", shape_str(from), " (",
               numel, " elements) as ", shape_str(shape));
  return shape;
}

// Strides for viewing (shape, strides) as `target` without copying; false if impossible.
// Old dims are taken in chunks that are contiguous in memory; each chunk may be re-split freely.
bool view_strides(const Shape& shape, const Strides& strides, const Shape& target, Strides& out) {
  out.assign(target.size(), 0);
  auto view_d = static_cast<std::int64_t>(target.size()) - 1;
  std::int64_t chunk_stride = strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (auto d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    const bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= target[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return false;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), shape_, "view");
  if (is_contiguous()) return Tensor(storage_, offset_, target, contiguous_strides(target), dtype_);
  Strides st;
  TROUPE_CHECK(view_strides(shape_, strides_, target, st), invalid_argument, "view: a tensor of shape ",
               shape_str(shape_), " with strides ", shape_str(strides_), " cannot be viewed as ", shape_str(target),
               " without a copy; use reshape() (which copies) or contiguous() first");
  return Tensor(storage_, offset_, target, st, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape target = infer_shape(shape, numel(), shape_, "reshape");
  if (is_contiguous()) return Tensor(storage_, offset_, target, contiguous_strides(target), dtype_);
  Strides st;
  if (view_strides(shape_, strides_, target, st)) return Tensor(storage_, offset_, target, st, dtype_);
  return contiguous().view(target);
}

Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  const int ia = normalize_axis(a, shape_.size(), "transpose");
  const int ib = normalize_axis(b, shape_.size(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[ia], t.shape_[ib]);
  std::swap(t.strides_[ia], t.strides_[ib]);
  return t;
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  TROUPE_CHECK(dims.size() == shape_.size(), invalid_argument, "permute: ", dims.size(),
               " dims given for a tensor of rank ", shape_.size());
  std::vector<bool> seen(dims.size(), false);
  Tensor t = *this;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const int d = normalize_axis(dims[i], shape_.size(), "permute");
    TROUPE_CHECK(!seen[d], invalid_argument, "permute: dimension ", d, " appears twice");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::slice(std::int64_t axis, std::int64_t start, std::int64_t end, std::int64_t step) const {
  const int ax = normalize_axis(axis, shape_.size(), "slice");
  TROUPE_CHECK(step > 0, invalid_argument, "slice: step must be positive, got ", step);
  const std::int64_t n = shape_[ax];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Tensor t = *this;
  t.shape_[ax] = (end - start + step - 1) / step;
  t.strides_[ax] = strides_[ax] * step;
  t.offset_ = offset_ + start * strides_[ax] * static_cast<std::int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  TROUPE_CHECK(shape.size() >= shape_.size(), shape_mismatch, "expand: cannot expand ", shape_str(shape_), " to ",
               shape_str(shape), " (fewer dimensions)");
  const std::size_t lead = shape.size() - shape_.size();
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    const auto want = shape[lead + i];
    TROUPE_CHECK(shape_[i] == want || shape_[i] == 1, shape_mismatch, "expand: cannot expand ", shape_str(shape_),
                 " to ", shape_str(shape), " (dimension ", i, " has size ", shape_[i], ", not 1 or ", want, ")");
    t.strides_[lead + i] = shape_[i] == want ? strides_[i] : 0;
  }
  return t;
}

Tensor Tensor::unsqueeze(std::int64_t axis) const {
  const int ax = normalize_axis(axis, shape_.size() + 1, "unsqueeze");
  Tensor t = *this;
  const std::int64_t stride = ax < dim() ? strides_[ax] * shape_[ax] : 1;
  t.shape_.insert(t.shape_.begin() + ax, 1);
  t.strides_.insert(t.strides_.begin() + ax, stride);
  return t;
}

Tensor Tensor::squeeze(std::int64_t axis) const {
  const int ax = normalize_axis(axis, shape_.size(), "squeeze");
  TROUPE_CHECK(shape_[ax] == 1, shape_mismatch, "squeeze: dimension ", ax, " of ", shape_str(shape_),
               " has size ", shape_[ax], ", not 1");
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + ax);
  t.strides_.erase(t.strides_.begin() + ax);
  return t;
}

Tensor Tensor::contiguous() const {
  TROUPE_CHECK(defined(), invalid_argument, "contiguous(): the tensor is undefined");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  TROUPE_CHECK(defined(), invalid_argument, "clone(): the tensor is undefined");
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  TROUPE_CHECK(defined(), invalid_argument, "to(", dtype_name(dtype), "): the tensor is undefined");
  if (dtype == dtype_ && is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(const Device& device) const {
  TROUPE_CHECK(defined(), invalid_argument, "to(", device.str(), "): the tensor is undefined");
  if (device == this->device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, device);
  detail::copy_bytes_between_devices(out.raw_data(), device, src.raw_data(), src.device(), nbytes());
  return out;
}

namespace {

template <class D, class S>
void copy_elements(const Tensor& dst, const Tensor& src, const Strides& src_strides) {
  auto* d = static_cast<D*>(dst.raw_data());
  const auto* s = static_cast<const S*>(src.raw_data());
  cpu::parallel_for_each_run<2>(dst.shape(), {&dst.strides(), &src_strides}, 0.5, [&](auto off, auto step, std::int64_t n) {
    D* dp = d + off[0];
    const S* sp = s + off[1];
    if constexpr (cpu::kHasConvertRun<S, D>)
      if (step[0] == 1 && step[1] == 1) return cpu::convert_run(sp, dp, n);
    // A dense run of one dtype (a permuted view's rows, a concat's pieces): GCC copies 2-byte
    // element structs one at a time, memcpy moves the bytes in vectors.
    if constexpr (std::is_same_v<D, S>)
      if (step[0] == 1 && step[1] == 1) return static_cast<void>(std::memcpy(dp, sp, static_cast<std::size_t>(n) * sizeof(D)));
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<D, S>)
        dp[i * step[0]] = sp[i * step[1]];
      else
        dp[i * step[0]] = from_double<D>(to_double(sp[i * step[1]]));
    }
  });
}

// dst = src on the host, src broadcast to dst's shape and converted to its dtype.
void copy_on_host(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && src.shape() == dst.shape()) {
    std::memmove(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  const Strides src_strides = cpu::broadcast_strides(src.shape(), src.strides(), dst.shape());
  visit_dtype(dst.dtype(), [&](auto dtag) {
    visit_dtype(src.dtype(), [&](auto stag) { copy_elements<decltype(dtag), decltype(stag)>(dst, src, src_strides); });
  });
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  TROUPE_CHECK(defined() && src.defined(), invalid_argument, "copy_from: undefined tensor");
  const Shape out = broadcast_shapes(src.shape_, shape_, "copy_from");
  TROUPE_CHECK(out == shape_, shape_mismatch, "copy_from: source ", shape_str(src.shape_),
               " does not broadcast to destination ", shape_str(shape_));
  if (device() == src.device() && !device().is_cpu()) {  // strided, broadcast, converted: on the device
    const auto copy = [dst = *this, src] { detail::copy_elements_on_device(dst, src); };
    if (Stream* stream = current_stream()) return stream->enqueue(copy);
    return copy();
  }
  if (!device().is_cpu() || !src.device().is_cpu()) {
    TROUPE_CHECK(dtype_ == src.dtype_ && src.shape_ == shape_ && is_contiguous() && src.is_contiguous(), unsupported,
                 "copy_from between ", src.device().str(), " and ", device().str(),
                 " needs dense tensors of equal shape and dtype; call contiguous() and to(dtype) on one side first");
    const auto copy = [dst = *this, src] {
      detail::copy_bytes_between_devices(dst.raw_data(), dst.device(), src.raw_data(), src.device(), dst.nbytes());
    };
    if (Stream* stream = current_stream()) return stream->enqueue(copy);
    return copy();
  }
  if (Stream* stream = current_stream()) {
    stream->enqueue([dst = *this, src] { copy_on_host(dst, src); });
    return;
  }
  copy_on_host(*this, src);
}

double Tensor::item() const {
  TROUPE_CHECK(numel() == 1, shape_mismatch, "item(): tensor of shape ", shape_str(shape_),
               " has ", numel(), " elements, not 1");
  Tensor host = to(Device::cpu());
  return visit_dtype(dtype_, [&](auto tag) { return to_double(*static_cast<const decltype(tag)*>(host.raw_data())); });
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype_) << ", " << shape_str(shape_) << ", " << device().str() << ")";
  return os.str();
}

}  // namespace troupe
