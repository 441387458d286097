#pragma once
// Data parallelism's gradient compression (GradCompression, program.hpp): each bucket's all-reduce
// on the communicator thread, compressed, with the state it keeps from step to step (PowerSGD's
// error feedback and warm-start factors), and `auto`'s choice per bucket from the job's own
// measured collectives and overlap windows.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bucket_layout.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

/// One bucket's compressed all-reduce. Used by the communicator thread alone (and between steps).
class BucketCompressor {
 public:
  /// For the gradients `entries` of a bucket of `numel` elements; `names` (by sink) key its state.
  BucketCompressor(std::vector<BucketEntry> entries, std::int64_t numel, GradCompression how,
                   std::vector<std::string> names = {});
  /// Reduces `flat` (this rank's bucket, f32) over `g` in place: every rank ends with the same
  /// (decompressed) result. PowerSGD sends the first `warmup_steps` rounds whole.
  void all_reduce(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op);
  /// Rounds reduced so far.
  std::uint64_t rounds() const { return rounds_; }
  void set_rounds(std::uint64_t rounds) { rounds_ = rounds; }
  /// How it travels now.
  const GradCompression& how() const { return how_; }
  /// Travels as `how` from the next round on (auto's choice; a PowerSGD state of another rank is dropped).
  void adopt(GradCompression how);
  /// Adds this rank's state to `out`: "<parameter>.powersgd_error" (not yet reduced) and
  /// "grad_compression.<parameter>.q" for each matrix PowerSGD has factored.
  void save(std::map<std::string, Tensor>& out) const;
  /// Checks `state`'s tensors for this bucket's matrices (throws naming one of another shape);
  /// with `apply`, takes them: each error times `error_share`, a warm start of another rank left out.
  void load(const std::map<std::string, Tensor>& state, double error_share, bool apply);
  /// The bucket's size and its matrices' shapes, for auto's costs.
  std::int64_t numel() const { return numel_; }
  const std::vector<BucketEntry>& entries() const { return entries_; }
  /// The parameter whose gradient sink `sink` is ("sink<k>" when unnamed).
  std::string name(int sink) const;

 private:
  // A gradient PowerSGD factors: its place in the bucket, its [n, m] view and its state.
  struct Matrix {
    std::int64_t offset = 0, n = 0, m = 0;
    std::string name;
    Tensor q;      // [m, r]: the last step's reduced Q (the warm start)
    Tensor error;  // [n, m]: what the factors missed, added to the next step's gradient
  };
  void powersgd(transport::ProcessGroup& g, const Tensor& flat, transport::ReduceOp op);

  std::vector<BucketEntry> entries_;
  std::vector<std::string> names_;
  GradCompression how_;
  std::int64_t numel_ = 0;
  std::vector<Matrix> matrices_;
  std::vector<std::pair<std::int64_t, std::int64_t>> whole_;  // [begin, end) ranges sent whole
  std::uint64_t rounds_ = 0;
};

/// A program's compressed buckets (the communicator actor's, on its thread during steps) and their
/// state for checkpoints (CompressionState, between steps).
class BucketCompressors : public CompressionState {
 public:
  /// For `layout`'s buckets reduced over `comm` with `op`; `names` by sink.
  BucketCompressors(const BucketLayout& layout, GradCompression how, std::vector<std::string> names,
                    std::shared_ptr<transport::Communicator> comm, transport::ReduceOp op);
  /// Bucket `bucket`'s all-reduce (on the communicator thread). `full_at` is when its last
  /// gradient was complete: auto measures each bucket's window and collective from it.
  void all_reduce(transport::ProcessGroup& g, std::size_t bucket, const Tensor& flat,
                  std::chrono::steady_clock::time_point full_at);

  std::map<std::string, Tensor> gather() const override;
  void load(const std::map<std::string, Tensor>& state) override;
  std::string choice() const override;

 private:
  // Auto: agrees on the ranks' measurements and picks each bucket's compression (on bucket 0's
  // turn, before its collective, so every rank decides at the same point).
  void decide(transport::ProcessGroup& g);
  void adopt(const std::vector<GradCompression>& choices);
  std::string describe_choices() const;

  static constexpr std::size_t kMeasuredRounds = 5;  // uncompressed rounds auto measures before it chooses

  std::vector<std::shared_ptr<BucketCompressor>> buckets_;
  GradCompression how_;
  std::shared_ptr<transport::Communicator> comm_;
  transport::ReduceOp op_;
  // Auto's measurements of the uncompressed rounds: per round, each bucket's full time and collective.
  std::vector<std::chrono::steady_clock::time_point> full_at_;
  std::vector<std::vector<double>> windows_ms_, collective_ms_, collective_cpu_ms_;  // [round][bucket]
  bool decided_ = false;
  mutable std::mutex choice_mutex_;  // the description is written on the communicator thread
  std::string choice_;
};

/// A bucket's floats on the wire under PowerSGD of rank r (its factors and what goes whole), and
/// the elements of the matrices it factors.
std::pair<std::int64_t, std::int64_t> powersgd_sizes(const std::vector<BucketEntry>& entries, std::int64_t numel,
                                                     std::int64_t r);

/// The CPU time the calling thread has used, in ms (auto counts what a collective takes from the cores).
double thread_cpu_ms();

/// One way a bucket can travel, as auto predicts it: its collective's time, and the CPU time the
/// communicator thread spends in it, which the compute's cores lose.
struct TravelCost {
  double ms = 0, cpu_ms = 0;
};

/// Auto's model of a step's end (docs/PARALLELISM.md, "auto"): bucket b is ready `window_ms[b]`
/// before backward ends, the collectives run one after another and take `cost_ms[b]`; returns how
/// long the last one ends after backward (0 when all are hidden).
double exposed_ms(const std::vector<double>& window_ms, const std::vector<double>& cost_ms);

/// What auto minimizes for one choice of `chosen` per bucket: exposed_ms plus the collectives' CPU time.
double step_cost_ms(const std::vector<double>& window_ms, const std::vector<TravelCost>& chosen);

/// Auto's choice: per bucket, an index into its options `options[b]` (least compression first).
/// Greedy from no compression: the one step up that lowers step_cost_ms most, while one still
/// lowers it by more than `threshold_ms`; then each bucket in turn takes the weakest option that
/// keeps the cost within `slack_ms` of that.
std::vector<std::size_t> least_compression(const std::vector<double>& window_ms,
                                           const std::vector<std::vector<TravelCost>>& options, double threshold_ms,
                                           double slack_ms);

}  // namespace troupe::actors
