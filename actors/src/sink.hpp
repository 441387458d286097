#pragma once
// What output sinks and gradient stages share: they keep each micro-batch's value and, after the
// step's last, combine them into the step's one value, which `finish` reports.

#include "node.hpp"

namespace troupe::actors {

/// A node that collects its one input over the micro-batches of a step.
class Sink : public NodeKind {
 public:
  Values act(Node& node, int mb) final;
  bool reports_done() const final { return false; }

 protected:
  /// Reports the step's combined value to the program actor.
  virtual void finish(Node& node, const Tensor& value) = 0;

 private:
  std::vector<Tensor> parts_;  // one value per micro-batch of the step in progress
};

}  // namespace troupe::actors
