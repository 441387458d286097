#pragma once
// Whole-file reads and writes for the harnesses that hand their input to a loader of files.

#include <fstream>
#include <sstream>
#include <string>

namespace troupe::fuzz {

/// The bytes of `path` (empty when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Replaces `path` with `bytes`.
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace troupe::fuzz
