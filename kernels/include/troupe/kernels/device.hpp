#pragma once
// Where a tensor's bytes live: host memory or one CUDA device.

#include <string>
#include <string_view>

namespace troupe {

/// The kind of memory a device has.
enum class DeviceKind { cpu, cuda };

/// A device: `cpu` or `cuda:N`.
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  /// The host.
  static Device cpu() { return {DeviceKind::cpu, 0}; }
  /// CUDA device number `i`.
  static Device cuda(int i) { return {DeviceKind::cuda, i}; }
  /// Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; throws troupe::Error otherwise.
  static Device parse(std::string_view text);
  /// "cpu" or "cuda:N".
  std::string str() const;
  /// True for the host.
  bool is_cpu() const { return kind == DeviceKind::cpu; }

  friend bool operator==(const Device& a, const Device& b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// Name of a device kind ("cpu", "cuda"), as used by the kernel registry.
const char* to_string(DeviceKind kind);

}  // namespace troupe
