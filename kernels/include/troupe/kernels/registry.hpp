#pragma once
// The kernel registry: one table keyed by (name, device kind, dtype). The front ends in
// troupe::kernels validate their inputs, allocate outputs and dispatch here, and so do graph ops
// that name a kernel; a missing entry is an error naming all three keys.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe {

/// One attribute value of a kernel call (an axis, a slope, a list of strides, ...).
using AttrValue = std::variant<std::int64_t, double, std::vector<std::int64_t>>;

/// Named, typed parameters of a kernel call.
class Attrs {
 public:
  Attrs() = default;
  /// Sets `name` to `value` and returns *this, for chaining.
  Attrs& set(const std::string& name, AttrValue value);
  /// Integer attribute `name`; throws if absent or not an integer.
  std::int64_t get_int(const std::string& name) const;
  /// Floating attribute `name`; throws if absent or not a double.
  double get_double(const std::string& name) const;
  /// Integer-list attribute `name`; throws if absent or not a list.
  const std::vector<std::int64_t>& get_ints(const std::string& name) const;
  /// True when `name` is set.
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  /// All attributes, sorted by name (for dumps).
  const std::map<std::string, AttrValue>& items() const { return values_; }

 private:
  const AttrValue& find(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

/// A kernel: reads `inputs`, writes the preallocated `outputs`.
using KernelFn = void (*)(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, const Attrs& attrs);

/// The table of kernels. Built once (thread-safe) with every kernel of this build registered.
class KernelRegistry {
 public:
  /// The process-wide registry.
  static KernelRegistry& instance();
  /// Adds a kernel; registering the same key twice is a programming error and throws.
  void add(const std::string& op, DeviceKind device, DType dtype, KernelFn fn);
  /// The kernel for the key; throws a missing_kernel Error naming op, device, dtype and what exists.
  KernelFn find(const std::string& op, DeviceKind device, DType dtype) const;
  /// True when the key has a kernel.
  bool contains(const std::string& op, DeviceKind device, DType dtype) const;

 private:
  KernelRegistry() = default;
  std::map<std::tuple<std::string, DeviceKind, DType>, KernelFn> kernels_;
};

/// Registers a kernel at load time from the file that defines it (the library is shared, so
/// every file's registrations run).
struct KernelRegistrar {
  KernelRegistrar(const char* op, DeviceKind device, DType dtype, KernelFn fn) {
    KernelRegistry::instance().add(op, device, dtype, fn);
  }
};

#define TROUPE_CONCAT_INNER(a, b) a##b
#define TROUPE_CONCAT(a, b) TROUPE_CONCAT_INNER(a, b)
/// Registers `fn` as the kernel for (op, DeviceKind::device, DType::dtype).
#define TROUPE_REGISTER_KERNEL(op, device, dtype, fn)                                     \
  static const ::troupe::KernelRegistrar TROUPE_CONCAT(troupe_kernel_registrar_, __COUNTER__)( \
      op, ::troupe::DeviceKind::device, ::troupe::DType::dtype, fn)

/// Runs kernel `op` for the device and dtype of `inputs[0]` (or `dtype` when given) after checking
/// that every defined input and output lives on the same device; queues it on the thread's
/// current stream instead when there is one (stream.hpp).
void dispatch(const std::string& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
              const Attrs& attrs = {});

}  // namespace troupe
