#pragma once
// What output sinks and gradient stages share: they keep each micro-batch's value and, after the
// step's last, combine them into the step's one value, which `finish` passes on.

#include "node.hpp"

namespace troupe::actors {

/// A node that collects its one input over the micro-batches of a step: a running weighted sum
/// (gradients, 0-d outputs), or the parts to concatenate.
class Sink : public NodeKind {
 public:
  Values act(Node& node, int mb) final;
  bool reports_done() const final { return false; }
  void after_act(Node& node) final;

 protected:
  /// Where the combined value is written: a gradient's slice of its bucket (data parallel), or an
  /// undefined tensor for a new one.
  virtual Tensor destination(Node&) { return Tensor(); }
  /// Computes, within the act, what passing the step's combined value on needs (a gradient's
  /// squared norm): the act's memory is planned, what follows it is not.
  virtual void prepare(Node&, const Tensor&) {}
  /// Passes the step's combined value on (after the act: sends only).
  virtual void finish(Node& node, const Tensor& value) = 0;

 private:
  std::vector<Tensor> parts_;  // concatenated outputs: one value per micro-batch of the step in progress
  Tensor sum_;                 // averaged ones (gradients, the loss): the weighted sum of the micro-batches so far
  Tensor combined_;            // the step's value, made by the last micro-batch's act, until passed on
};

}  // namespace troupe::actors
