#pragma once
// The devices a parallel training runs on: the processes of a job that troupe-launch, mpirun or
// Slurm started (they meet at the rendezvous and talk over UCX), or virtual devices of one process
// (one thread each, talking through shared mailboxes). Either way a Job makes communicators of
// groups of its ranks, each on a transport of its own, so kinds of traffic never queue behind each
// other.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// This rank's place in a job of ranks, and the maker of their communicators.
class Job {
 public:
  virtual ~Job() = default;
  /// The job the environment describes (troupe-launch's TROUPE_RANK and TROUPE_WORLD_SIZE, mpirun's
  /// or Slurm's; one process alone when none). Its ranks meet at the rendezvous when the first
  /// communicator is made, which fails within TROUPE_TIMEOUT naming the ranks that never came.
  static std::shared_ptr<Job> from_environment();
  /// `devices` virtual devices of this process: element r is device r's, for the thread that runs it.
  static std::vector<std::shared_ptr<Job>> virtual_devices(int devices);

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The ranks of the job on this machine (processes sharing its cores; 1 for virtual devices,
  /// threads of one process).
  int local_size() const { return local_size_; }
  /// How the job was started ("troupe-launch", "mpirun", "slurm", "virtual devices", "single process").
  const std::string& source() const { return source_; }
  /// A communicator of `members` (job ranks in group order, this rank among them) named `name`, on
  /// a transport of its own. A collective of the whole job: every rank makes its own group of one
  /// partition of the ranks, the same number of times, in the same order.
  virtual std::shared_ptr<transport::Communicator> communicator(const std::vector<int>& members, const char* name,
                                                                std::uint32_t channel) = 0;

 protected:
  Job(int rank, int size, std::string source, int local_size = 1)
      : rank_(rank), size_(size), local_size_(local_size), source_(std::move(source)) {}

 private:
  int rank_, size_, local_size_;
  std::string source_;
};

}  // namespace troupe::actors
