#pragma once
// Small models several suites use (the golden comparison with PyTorch and the runtime tests).

#include <memory>

#include "troupe/graph/nn.hpp"

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

}  // namespace troupe::test
