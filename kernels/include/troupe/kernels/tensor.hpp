#pragma once
// Tensor: a cheap, copyable handle to (storage, byte offset, shape, strides, dtype, device).
// Copying a Tensor copies the handle, never the bytes; views share storage.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "troupe/kernels/device.hpp"
#include "troupe/kernels/dtype.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/shape.hpp"
#include "troupe/kernels/storage.hpp"

namespace troupe {

/// An n-dimensional array handle. A default-constructed Tensor is "undefined" (no storage).
class Tensor {
 public:
  Tensor() = default;

  /// Uninitialised dense tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, const Device& device = Device::cpu());
  /// Dense tensor filled with zeros.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, const Device& device = Device::cpu());
  /// Dense tensor with every element equal to `value` (converted to dtype).
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     const Device& device = Device::cpu());
  /// Dense host tensor holding a copy of `values`; shape must have values.size() elements.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  /// 0-dimensional host tensor holding `value`.
  static Tensor scalar(double value, DType dtype = DType::f32);

  /// True when the handle refers to storage.
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  /// The device of the storage (cpu for an undefined tensor).
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  /// Number of dimensions.
  int dim() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension `axis` (negative counts from the end).
  std::int64_t size(std::int64_t axis) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  /// Byte offset of element [0, ..., 0] inside the storage.
  std::int64_t offset_bytes() const { return offset_; }
  /// Bytes the elements would take densely packed.
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  /// True when elements are densely packed in row-major order.
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  /// Address of element [0, ..., 0].
  void* raw_data() const;
  /// Typed address of element [0, ..., 0]; checks the dtype and that the tensor is on the host.
  template <class T>
  T* data() const;

  /// Same elements, new shape (one dim may be -1). A view when the layout allows, else a copy.
  Tensor reshape(const Shape& shape) const;
  /// Like reshape but never copies; throws when the layout does not allow a view.
  Tensor view(const Shape& shape) const;
  /// View with dimensions a and b swapped.
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  /// View with dimensions reordered: result dim i is input dim dims[i].
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  /// View of [start, end) with `step` along `axis`; negative start/end count from the end.
  Tensor slice(std::int64_t axis, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  /// View broadcasting size-1 (or missing leading) dims to `shape`, with stride 0.
  Tensor expand(const Shape& shape) const;
  /// View with a size-1 dimension inserted at `axis`.
  Tensor unsqueeze(std::int64_t axis) const;
  /// View with the size-1 dimension `axis` removed.
  Tensor squeeze(std::int64_t axis) const;

  /// This tensor if already dense, else a dense copy.
  Tensor contiguous() const;
  /// A dense copy that shares nothing with this tensor.
  Tensor clone() const;
  /// A dense copy converted to `dtype` (this tensor itself if the dtype already matches and it is dense).
  Tensor to(DType dtype) const;
  /// A dense copy on `device` (this tensor itself when already there).
  Tensor to(const Device& device) const;
  /// Copies `src` (same shape, or broadcastable to it; any dtype) into this tensor's elements (queued
  /// on the thread's current stream when it has one, stream.hpp).
  void copy_from(const Tensor& src);

  /// Host copy of the elements in row-major order; T must match the dtype.
  template <class T>
  std::vector<T> to_vector() const;
  /// The only element, as double; throws unless numel() == 1.
  double item() const;
  /// "Tensor(f32, [2, 3], cpu)": a one-line description for errors and logs.
  std::string str() const;

  /// Builds a view over existing storage; used by kernels that produce views.
  Tensor(std::shared_ptr<Storage> storage, std::int64_t offset_bytes, Shape shape, Strides strides, DType dtype);

 private:
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::f32;
};

template <class T>
T* Tensor::data() const {
  TROUPE_CHECK(defined(), invalid_argument, "data(): the tensor is undefined");
  TROUPE_CHECK(dtype_ == dtype_of<T>(), dtype_mismatch, "data<", dtype_name(dtype_of<T>()), ">() on a ",
               dtype_name(dtype_), " tensor ", shape_str(shape_));
  TROUPE_CHECK(device().is_cpu(), device_mismatch, "data() on a tensor on ", device().str(),
               "; copy it to the host first with .to(Device::cpu())");
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  TROUPE_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), shape_mismatch,
               "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor dense = to(Device::cpu()).contiguous();
  const T* p = dense.data<T>();
  return std::vector<T>(p, p + dense.numel());
}

}  // namespace troupe
