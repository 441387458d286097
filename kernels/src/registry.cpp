#include "troupe/kernels/registry.hpp"
#include "troupe/kernels/stream.hpp"

#include "cpu/parallel.hpp"

namespace troupe {

Attrs& Attrs::set(const std::string& name, AttrValue value) {
  values_[name] = std::move(value);
  return *this;
}

const AttrValue& Attrs::find(const std::string& name) const {
  auto it = values_.find(name);
  TROUPE_CHECK(it != values_.end(), invalid_argument, "kernel attribute '", name, "' is missing");
  return it->second;
}

std::int64_t Attrs::get_int(const std::string& name) const {
  const auto* v = std::get_if<std::int64_t>(&find(name));
  TROUPE_CHECK(v, invalid_argument, "kernel attribute '", name, "' is not an integer");
  return *v;
}

double Attrs::get_double(const std::string& name) const {
  const auto* v = std::get_if<double>(&find(name));
  TROUPE_CHECK(v, invalid_argument, "kernel attribute '", name, "' is not a number");
  return *v;
}

const std::vector<std::int64_t>& Attrs::get_ints(const std::string& name) const {
  const auto* v = std::get_if<std::vector<std::int64_t>>(&find(name));
  TROUPE_CHECK(v, invalid_argument, "kernel attribute '", name, "' is not a list of integers");
  return *v;
}

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(const std::string& op, DeviceKind device, DType dtype, KernelFn fn) {
  const bool inserted = kernels_.emplace(std::make_tuple(op, device, dtype), fn).second;
  TROUPE_CHECK(inserted, invalid_argument, "kernel '", op, "' for ", to_string(device), "/", dtype_name(dtype),
               " is registered twice");
}

bool KernelRegistry::contains(const std::string& op, DeviceKind device, DType dtype) const {
  return kernels_.count(std::make_tuple(op, device, dtype)) != 0;
}

KernelFn KernelRegistry::find(const std::string& op, DeviceKind device, DType dtype) const {
  auto it = kernels_.find(std::make_tuple(op, device, dtype));
  if (it != kernels_.end()) return it->second;
  std::string have;
  for (const auto& [key, fn] : kernels_)
    if (std::get<0>(key) == op)
      have += std::string(have.empty() ? "" : ", ") + to_string(std::get<1>(key)) + "/" + dtype_name(std::get<2>(key));
  fail(ErrorKind::missing_kernel, "no kernel for op '", op, "' on device '", to_string(device), "' with dtype '",
       dtype_name(dtype), "'", have.empty() ? std::string("; the op has no kernels at all") : "; available: " + have);
}

void dispatch(const std::string& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
              const Attrs& attrs) {
  const Tensor* first = nullptr;
  for (const auto& t : inputs)
    if (t.defined()) { first = &t; break; }
  TROUPE_CHECK(first != nullptr, invalid_argument, op, ": called without a defined input tensor");
  const Device device = first->device();
  auto check = [&](const std::vector<Tensor>& ts, const char* role) {
    for (std::size_t i = 0; i < ts.size(); ++i)
      TROUPE_CHECK(!ts[i].defined() || ts[i].device() == device, device_mismatch, op, ": ", role, " ", i, " is on ",
                   ts[i].device().str(), " but input 0 is on ", device.str(), "; move them to one device with .to()");
  };
  check(inputs, "input");
  check(outputs, "output");
  const KernelFn kernel = KernelRegistry::instance().find(op, device.kind, first->dtype());
  if (Stream* stream = current_stream()) {
    // Queued: the handles it holds keep the tensors' memory alive until it has run.
    stream->enqueue([kernel, inputs, outputs, attrs]() mutable { kernel(inputs, outputs, attrs); });
    return;
  }
  const cpu::KernelCallScope computing;  // this thread's core is busy: parallel kernels count it out
  kernel(inputs, outputs, attrs);
}

}  // namespace troupe
