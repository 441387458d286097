#pragma once
// safetensors: the Hugging Face weights format (u64 header length, JSON header, raw little-endian
// data), so Troupe reads and writes the files PyTorch users exchange without any Python.

#include <map>
#include <string>

#include "troupe/kernels/tensor.hpp"

namespace troupe::graph {

/// Named tensors plus the file's free-form string metadata ("__metadata__").
struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (any device/layout; copied to dense CPU) atomically: temp file in the same folder, fsync, rename, fsync of the folder. Throws troupe::Error(io) naming the path on failure.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// The bytes save_safetensors() would write (parse_safetensors() reads them back): tensors sent
/// between processes as one message.
std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});
/// Reads and validates a file; every tensor is a dense CPU tensor.
SafetensorsFile load_safetensors(const std::string& path);

/// Parses from memory (what load_safetensors uses after reading the file); `source` names the data in errors.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& source);

}  // namespace troupe::graph
