#include "troupe/kernels/error.hpp"

namespace troupe {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::shape_mismatch: return "shape mismatch";
    case ErrorKind::dtype_mismatch: return "dtype mismatch";
    case ErrorKind::device_mismatch: return "device mismatch";
    case ErrorKind::out_of_range: return "out of range";
    case ErrorKind::missing_kernel: return "missing kernel";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::io: return "i/o error";
    case ErrorKind::runtime: return "runtime error";
  }
  return "error";
}

std::string printable(const std::string& text, std::size_t limit) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= limit) return out + "...";
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(to_string(kind)) + ": " + message), kind_(kind), message_(message) {}

}  // namespace troupe
