#pragma once
// Finding the other ranks of a job. JobInfo says who this process is (from troupe-launch, mpirun or
// Slurm); Bootstrap is the rendezvous: rank 0 listens (loopback by default), the others connect and
// present the job token, and the ranks exchange small blobs (UCX worker addresses). A connection
// with a wrong token is refused and logged; a rank that never arrives is named in the error.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::transport {

/// This process's place in the job.
struct JobInfo {
  int rank = 0, size = 1;
  int local_size = 1;        // ranks of the job on this machine, sharing its cores
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string token;         // shared secret of the job (TROUPE_JOB_TOKEN)
  std::string source;        // "troupe-launch", "mpirun", "pmi", "slurm", "pmix" or "single process"
  std::chrono::milliseconds timeout{30000};  // how long to wait for a peer (TROUPE_TIMEOUT, seconds, fractions allowed)
  /// From TROUPE_RANK/TROUPE_WORLD_SIZE/TROUPE_MASTER_ADDR/TROUPE_MASTER_PORT/TROUPE_JOB_TOKEN/TROUPE_TIMEOUT,
  /// else OMPI_COMM_WORLD_RANK/SIZE (Open MPI's mpirun), else PMI_RANK/PMI_SIZE (MPICH, Intel MPI),
  /// else SLURM_PROCID/SLURM_NTASKS, else PMIX_RANK with TROUPE_WORLD_SIZE, else a single process; the
  /// local size from TROUPE_LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or
  /// SLURM_NTASKS_PER_NODE (else 1). Without TROUPE_MASTER_ADDR the master is Slurm's launch node
  /// (SLURM_LAUNCH_NODE_IPADDR) or the job's first node (SLURM_JOB_NODELIST), else 127.0.0.1.
  static JobInfo from_environment();
};

/// The first host of a Slurm node list ("node[07-09,12],gpu1" gives "node07").
std::string first_slurm_host(const std::string& nodelist);

/// A TCP port on the loopback interface that is free right now (for a job's TROUPE_MASTER_PORT).
int free_local_port();

/// The rendezvous connection of one rank (rank 0: to every other rank; others: to rank 0).
class Bootstrap {
 public:
  /// Connects the job within `timeout`; throws naming the ranks that never arrived, or the master
  /// that could not be reached.
  Bootstrap(const JobInfo& job, std::chrono::milliseconds timeout);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;
  /// Every rank's `mine`, in rank order (a collective of the bootstrap connections).
  std::vector<std::string> all_gather(const std::string& mine);
  int rank() const { return job_.rank; }
  int size() const { return job_.size; }

 private:
  // Rank 0: every other rank's connection, by `deadline`.
  void accept_ranks(std::chrono::steady_clock::time_point deadline);

  JobInfo job_;
  std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  std::vector<int> peers_;  // rank 0: socket of each rank (index = rank); others: [socket to rank 0]
};

}  // namespace troupe::transport
