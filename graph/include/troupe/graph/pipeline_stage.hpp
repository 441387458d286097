#pragma once
// One device's part of a pipelined training step (docs/PARALLELISM.md, "Pipeline parallelism"):
// a stage runs a contiguous run of the model's layers. Its forward receives the previous stage's
// output and sends its own to the next; its backward starts from the gradient the next stage
// sends back and sends the gradient of what it received to the previous one. The sends and
// receives are graph ops on channels between two devices (registered collective groups,
// collectives.hpp), each channel carrying one direction of one boundary, so a send never queues
// behind a receive. The runtime runs them like collectives, by message, and the micro-batches
// flowing through the stages are the pipeline: no scheduler, only the registers' back-pressure.

#include "troupe/graph/trace.hpp"

namespace troupe::graph {

/// The channels a stage meets its neighbours on: ids of registered groups of two devices
/// (GroupRegistration::id), -1 where the stage has no neighbour. The first stage has no `*_in`
/// activation and no `gradient_out`; the last stage no `activation_out` and no `gradient_in`.
struct StageChannels {
  int activation_in = -1;   // the previous stage's output arrives here
  int activation_out = -1;  // this stage's output leaves here
  int gradient_in = -1;     // the gradient of this stage's output arrives here (from the next stage)
  int gradient_out = -1;    // the gradient of what arrived on activation_in leaves here
  bool first() const { return activation_in < 0; }
  bool last() const { return activation_out < 0; }
};

/// `x` (dense or not) sent to the other device of `group`; a 0-d f32 zero once it has left, which
/// an output of the step keeps alive so that the send runs.
Var pipe_send(const Var& x, int group);
/// A tensor of `like`'s shape and dtype received from the other device of `group` (`like` gives
/// only the shape: a stand-in input, or the value whose gradient arrives). The dtype stays the
/// one `like` has now, whatever mixed precision later does to `like`.
Var pipe_recv(const Var& like, int group);

/// A stage's forward as a function to trace, from `stage`, which computes the stage's layers:
/// with channels.activation_in its input 0 is a stand-in of the received value's shape (the
/// previous stage's output, in the dtype that stage's output has after mixed precision), which
/// `stage` gets received; the other inputs are the batch's. Its outputs: the stage's output 0 (the
/// next stage's input, or the loss on the last stage), then the received input (unless first):
/// what TracedFunction::with_stage_gradients() reads. Trace it, then autocast and optimize it as
/// a whole step's forward.
TraceableFn stage_forward(TraceableFn stage, StageChannels channels);

}  // namespace troupe::graph
