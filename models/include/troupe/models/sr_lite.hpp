#pragma once
// The super-resolution model of troupe-sr ("sr-lite"): conv3x3 3->64 + activation, residual blocks
// (conv3x3, activation, conv3x3, plus the skip), conv3x3 64->3*r*r and a pixel shuffle by r = 2.
// Parameter names match a plain PyTorch module of the same structure (docs/APPS.md).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/nn.hpp"

namespace troupe::models {

/// The activation between convolutions.
enum class Activation {
  relu,         // plain relu and its gradient
  custom_relu,  // relu forward, leaky gradient (slope 0.01): the custom-gradient path
};

/// "relu" or "custom-relu" -> Activation; throws naming the value otherwise.
Activation parse_activation(const std::string& name);
/// The flag spelling of `a`.
const char* to_string(Activation a);

/// Shape of sr-lite; the defaults are the model.
struct SrConfig {
  std::int64_t channels = 64;
  std::int64_t blocks = 4;
  std::int64_t upscale = 2;
  Activation activation = Activation::custom_relu;
};

/// conv, act, conv, + x.
class ResidualBlock : public graph::Layer {
 public:
  ResidualBlock(std::int64_t channels, Activation act, Generator& gen);
  graph::Var forward(const graph::Var& x) override;
  std::shared_ptr<graph::Conv2d> conv1, conv2;
  Activation act;
};

/// The model as a Layer: [N, 3, H, W] -> [N, 3, H*r, W*r]. Names: head, body.<i>.{conv1,conv2}, tail.
class SrLite : public graph::Layer {
 public:
  SrLite(const SrConfig& config, Generator& gen);
  graph::Var forward(const graph::Var& x) override;
  SrConfig config;
  std::shared_ptr<graph::Conv2d> head, tail;
  std::shared_ptr<graph::Sequential> body;
  std::vector<std::shared_ptr<ResidualBlock>> block_list;  // body's blocks, in order
};

/// The activation `a` applied to x.
graph::Var activate(const graph::Var& x, Activation a);

}  // namespace troupe::models
