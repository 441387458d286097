#include "troupe/kernels/device.hpp"

#include <cstdlib>

#include "troupe/kernels/error.hpp"

namespace troupe {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    std::string digits(text.substr(5));
    char* end = nullptr;
    long i = std::strtol(digits.c_str(), &end, 10);
    if (*end == '\0' && i >= 0 && i < 1024) return cuda(static_cast<int>(i));
  }
  fail(ErrorKind::invalid_argument, "unknown device '", text, "'; expected 'cpu', 'cuda' or 'cuda:N'");
}

}  // namespace troupe
