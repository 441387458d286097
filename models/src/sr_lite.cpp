#include "troupe/models/sr_lite.hpp"

#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::models {

using graph::Var;

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "custom-relu") return Activation::custom_relu;
  fail(ErrorKind::invalid_argument, "--act '", name, "' is not an activation; use relu or custom-relu");
}

const char* to_string(Activation a) { return a == Activation::relu ? "relu" : "custom-relu"; }

Var activate(const Var& x, Activation a) { return a == Activation::relu ? graph::relu(x) : graph::custom_relu(x, 0.01); }

ResidualBlock::ResidualBlock(std::int64_t channels, Activation a, Generator& gen) : act(a) {
  conv1 = register_module("conv1", std::make_shared<graph::Conv2d>(channels, channels, 3, gen, 1, 1));
  conv2 = register_module("conv2", std::make_shared<graph::Conv2d>(channels, channels, 3, gen, 1, 1));
}

Var ResidualBlock::forward(const Var& x) { return x + (*conv2)(activate((*conv1)(x), act)); }

SrLite::SrLite(const SrConfig& c, Generator& gen) : config(c) {
  TROUPE_CHECK(c.channels > 0 && c.blocks >= 0 && c.upscale >= 1, invalid_argument,
               "sr-lite: channels and upscale must be positive and blocks >= 0");
  head = register_module("head", std::make_shared<graph::Conv2d>(3, c.channels, 3, gen, 1, 1));
  body = register_module("body", std::make_shared<graph::Sequential>());
  for (std::int64_t i = 0; i < c.blocks; ++i) {
    block_list.push_back(std::make_shared<ResidualBlock>(c.channels, c.activation, gen));
    body->add(block_list.back());
  }
  tail = register_module("tail", std::make_shared<graph::Conv2d>(c.channels, 3 * c.upscale * c.upscale, 3, gen, 1, 1));
}

Var SrLite::forward(const Var& x) {
  TROUPE_CHECK(x.dim() == 4 && x.shape()[1] == graph::SymDim(3), shape_mismatch, "sr-lite: input must be [N, 3, H, W], got ",
               sym_shape_str(x.shape()));
  // DEBUG=true: each block's output and its gradient, printed per step; nothing otherwise.
  Var h = graph::debug_print("head", activate((*head)(x), config.activation));
  for (std::size_t i = 0; i < block_list.size(); ++i) h = graph::debug_print("block" + std::to_string(i), (*block_list[i])(h));
  return graph::pixel_shuffle((*tail)(h), config.upscale);
}

}  // namespace troupe::models
