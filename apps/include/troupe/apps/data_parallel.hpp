#pragma once
// The data-parallel side of a training app (--dp N): joining the job that troupe-launch, mpirun or
// Slurm started, one UCX communicator for gradient AllReduces and a separate one for the small
// all-gathers of --check-grads, so the two kinds of traffic never queue behind each other.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "troupe/actors/program.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::apps {

/// The flags of an app that trains data-parallel (troupe-gpt's --dp, --comm-fusion-mb, --check-grads).
struct DataParallelFlags {
  int ranks = 1;
  double comm_fusion_mb = 64;  // AllReduce bucket size limit
  bool check_grads = false;    // compare the ranks' post-reduce gradient norms every step
};

/// This rank's place in a data-parallel job and its communicators.
class DataParallelJob {
 public:
  /// Joins a job of `ranks` ranks (1: a single process, nothing to join). Throws when the
  /// environment describes another world size, naming both.
  explicit DataParallelJob(int ranks);
  int rank() const { return job_.rank; }
  int size() const { return job_.size; }
  /// The runtime's data-parallel options (communicator null for a single process).
  actors::DataParallel options(double fusion_mb) const;
  /// --check-grads: gathers every rank's post-reduce bucket norms and returns one warning line per
  /// bucket whose norms differ by more than 1e-5 relative (empty when they agree).
  std::vector<std::string> compare_bucket_norms(std::int64_t step, const std::vector<double>& squared_norms);
  /// How the job was started ("troupe-launch", "mpirun", ...).
  const std::string& source() const { return job_.source; }

 private:
  transport::JobInfo job_;
  std::unique_ptr<transport::Bootstrap> bootstrap_;
  std::shared_ptr<transport::Communicator> allreduce_, allgather_;
};

}  // namespace troupe::apps
