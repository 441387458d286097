#pragma once
// Data parallelism's gradient compression (GradCompression, program.hpp) for one bucket: its
// all-reduce on the communicator thread, compressed, and the state it keeps from step to step
// (PowerSGD's error feedback and warm-start factors).

#include <cstdint>
#include <memory>
#include <vector>

#include "bucket_layout.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

/// One bucket's compressed all-reduce. Used by the communicator thread alone.
class BucketCompressor {
 public:
  /// For the gradients `entries` of a bucket of `numel` elements.
  BucketCompressor(const std::vector<BucketEntry>& entries, std::int64_t numel, GradCompression how);
  /// Reduces `flat` (this rank's bucket, f32) over `g` in place: every rank ends with the same
  /// (decompressed) result. `step` counts PowerSGD's warm-up.
  void all_reduce(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op, std::uint64_t step);
  /// The bytes this rank put into the collectives of the last all_reduce (each ring sends about
  /// twice that), for the step's accounting and benchmarks.
  std::uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  // A gradient PowerSGD factors: its place in the bucket, its [n, m] view and its state.
  struct Matrix {
    std::int64_t offset = 0, n = 0, m = 0;
    Tensor q;      // [m, r]: the last step's reduced Q (the warm start)
    Tensor error;  // [n, m]: what the factors missed, added to the next step's gradient
  };
  void powersgd(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op);

  GradCompression how_;
  std::int64_t numel_ = 0;
  std::vector<Matrix> matrices_;
  std::vector<std::pair<std::int64_t, std::int64_t>> whole_;  // [begin, end) ranges sent whole
  std::uint64_t payload_bytes_ = 0;
};

}  // namespace troupe::actors
