#include "troupe/apps/weights.hpp"

#include "troupe/apps/cli.hpp"
#include "troupe/graph/safetensors.hpp"

namespace troupe::apps {

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

}  // namespace troupe::apps
