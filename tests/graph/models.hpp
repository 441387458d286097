#pragma once
// Small models several suites use (the golden comparison with PyTorch and the runtime tests).

#include <memory>
#include <string>
#include <vector>

#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"

namespace troupe::test {

/// conv(3->8, 3x3, pad 1), relu, conv(8->12, 3x3, pad 1), pixel_shuffle(2): the small
/// super-resolution net of the golden fixtures; parameters "0.weight" ... "2.bias".
inline std::shared_ptr<graph::Sequential> small_conv_net(Generator& gen) {
  auto net = std::make_shared<graph::Sequential>();
  net->add(std::make_shared<graph::Conv2d>(3, 8, 3, gen, 1, 1))
      .add(std::make_shared<graph::ReLU>())
      .add(std::make_shared<graph::Conv2d>(8, 12, 3, gen, 1, 1))
      .add(std::make_shared<graph::PixelShuffle>(2));
  return net;
}

/// conv, activation, residual blocks (conv, activation, conv, + skip), conv, pixel shuffle: the
/// shape of sr-lite, small; the activation is custom_relu (a custom-gradient region) or relu.
class SrLike : public graph::Module {
 public:
  explicit SrLike(bool custom_relu) : custom_(custom_relu) {
    head_ = register_module("head", std::make_shared<graph::Conv2d>(3, 8, 3, gen_, 1, 1));
    for (int k = 0; k < 4; ++k)
      body_.push_back(register_module("body" + std::to_string(k), std::make_shared<graph::Conv2d>(8, 8, 3, gen_, 1, 1)));
    tail_ = register_module("tail", std::make_shared<graph::Conv2d>(8, 12, 3, gen_, 1, 1));
  }
  graph::Var operator()(const graph::Var& x) {
    graph::Var h = act((*head_)(x));
    for (std::size_t k = 0; k < body_.size(); k += 2) h = h + (*body_[k + 1])(act((*body_[k])(h)));
    return graph::pixel_shuffle((*tail_)(h), 2);
  }

 private:
  graph::Var act(const graph::Var& x) const { return custom_ ? graph::custom_relu(x) : graph::relu(x); }
  Generator gen_{11};
  bool custom_;
  std::shared_ptr<graph::Conv2d> head_, tail_;
  std::vector<std::shared_ptr<graph::Conv2d>> body_;
};

}  // namespace troupe::test
