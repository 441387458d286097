#include "troupe/models/weights.hpp"

#include <fstream>
#include <sstream>

#include <filesystem>

#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::models {

void require_file(const std::string& path, const std::string& expected) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  TROUPE_CHECK(std::filesystem::exists(status), io, "'", path, "' does not exist; ", expected);
  TROUPE_CHECK(!std::filesystem::is_directory(status), io, "'", path, "' is a folder; ", expected);
}

std::string read_text_file(const std::string& path, const std::string& expected) {
  require_file(path, expected);
  std::ifstream in(path, std::ios::binary);
  TROUPE_CHECK(in.good(), io, "cannot open '", path, "'; check its permissions (", expected, ")");
  std::ostringstream s;
  s << in.rdbuf();
  TROUPE_CHECK(!in.bad(), io, "cannot read '", path, "'");
  return s.str();
}

void naming_file(const std::string& file, const std::string& context, const std::string& advice,
                 const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    fail(e.kind(), "'", file, "' ", context, ": ", e.message(), "; ", advice);
  }
}

std::map<std::string, Tensor> read_weights(const std::string& path, const std::string& expected) {
  require_file(path, expected);
  return graph::load_safetensors(path).tensors;
}

void load_weights_into(graph::Module& model, const std::map<std::string, Tensor>& weights, const std::string& file,
                       const std::string& advice) {
  naming_file(file, "does not fit the model", advice, [&] { model.load_state_dict(weights); });
}

void load_optimizer_state(graph::Optimizer& optimizer, const std::map<std::string, Tensor>& state, const std::string& file) {
  naming_file(file, "does not fit the optimizer", "the checkpoint is damaged or from another model",
              [&] { optimizer.load_state_dict(state); });
}

}  // namespace troupe::models
