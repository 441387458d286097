#pragma once
// What one training step of a ParallelTraining reports (parallel_training.hpp).

#include <string>
#include <vector>

namespace troupe::actors {

/// What one step reports.
struct StepReport {
  double loss = 0;           // averaged over the replicas
  double lr = 0;             // the learning rate the update used (group 0's; the schedule's when one is set)
  double grad_norm = 0;      // before clipping (measure_gradients)
  double grad_variance = 0;  // of all gradient elements (measure_gradients)
  std::vector<double> bucket_squared_norms;  // data parallel: each reduced bucket's squared norm
  double comm_ms = 0, exposed_comm_ms = 0;   // data parallel: gradient communication, and the part after compute
  std::uint64_t comm_bytes = 0;              // data parallel: bytes this rank sent for it
  double loss_scale = 0;     // loss scaling: the scale the step ran with (0: no loss scaling)
  bool skipped = false;      // loss scaling: an Inf or NaN gradient skipped the update
  /// check_gradients: one line per bucket whose reduced norm differs between the replicas by more
  /// than 1e-5 relative ("bucket 2: replica 0 gradient norm ..., replica 1 ...").
  std::vector<std::string> gradient_warnings;
  /// Gradient compression auto: what it chose per bucket and why, on the step it chose (else empty).
  std::string compression_choice;
};

}  // namespace troupe::actors
