#pragma once
// The parallel side of a training app (--dp D, --tp T, or a mesh the planner chooses once the
// processes joined): joining the job of D x T processes that troupe-launch, mpirun or Slurm
// started, and its communicators. Rank r is data-parallel rank
// r / T and tensor-parallel rank r % T. Along dp: the gradient AllReduces, the small all-gathers
// of --check-grads and ZeRO-1's parameter all-gathers; along tp: the step's collectives and the
// clipping norm. Each has a transport of its own, so the kinds of traffic never queue behind each other.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/plan/link.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::apps {

/// The flags of an app that trains data-parallel (troupe-gpt's --dp, --comm-fusion-mb, --check-grads).
struct DataParallelFlags {
  int ranks = 1;
  double comm_fusion_mb = 0;   // AllReduce bucket size limit; 0: chosen from the dp group's measured link
  bool check_grads = false;    // compare the ranks' post-reduce gradient norms every step
};

/// Chooses a job's mesh once its processes have joined, from a communicator of all of them and
/// communicators of groups of them made on demand (to measure their links): a collective, every
/// rank calls it, and it must give every rank the same (dp, tp), dp x tp being the world size.
using MeshChooser = std::function<std::pair<int, int>(transport::Communicator& world, const plan::GroupMaker& group)>;

/// This process's place in a dp x tp job and its communicators.
class ParallelJob {
 public:
  /// Joins a job of `dp` x `tp` processes (1 x 1: a single process, nothing to join), with ZeRO-1's
  /// communicator when `zero`. Throws when the environment describes another world size, naming both.
  ParallelJob(int dp, int tp, bool zero = false);
  /// Joins the job the environment describes and takes its mesh from `choose` (the planner's search).
  ParallelJob(const MeshChooser& choose, bool zero);
  /// The processes of the job the environment describes (1: a single process).
  static int world_size();
  int rank() const { return job_.rank; }
  int size() const { return job_.size; }
  /// This process's data-parallel replica (which rows of the batch it takes), and their count.
  int dp_rank() const { return job_.rank / tp_; }
  int dp_size() const { return dp_; }
  /// This process's tensor-parallel shard, and their count.
  int tp_rank() const { return job_.rank % tp_; }
  int tp_size() const { return tp_; }
  /// The runtime's data-parallel options (communicator null without data parallelism; ZeRO-1 on
  /// with its group when the job was joined for it). `fusion_mb` 0: the bucket sizes are chosen
  /// from the dp group's link, measured now (a collective of the dp group; link() says what it found).
  actors::DataParallel options(double fusion_mb);
  /// The dp group's link as options() measured it (zeros when it did not).
  const plan::CostModel::Link& link() const { return link_; }
  /// The tp group: the step's collectives (null without tensor parallelism).
  const std::shared_ptr<transport::Communicator>& tensor_parallel() const { return tp_group_; }
  /// The tp group again, for the clipping norm, which the clip actor sums while the step's
  /// collectives run (null without tensor parallelism).
  const std::shared_ptr<transport::Communicator>& tensor_parallel_norms() const { return tp_norms_; }
  /// --check-grads: gathers the dp group's post-reduce bucket norms and returns one warning line
  /// per bucket whose norms differ by more than 1e-5 relative (empty when they agree).
  std::vector<std::string> compare_bucket_norms(std::int64_t step, const std::vector<double>& squared_norms);
  /// How the job was started ("troupe-launch", "mpirun", ...).
  const std::string& source() const { return job_.source; }

 private:
  // Connects the job's ranks (the rendezvous), then makes the dp and tp groups' communicators.
  void join();
  void make_groups(bool zero);
  // A communicator of `members` on a transport of its own (a collective of the job).
  std::shared_ptr<transport::Communicator> communicator(const std::vector<int>& members, const char* name,
                                                        std::uint32_t channel);

  int dp_ = 1, tp_ = 1;
  plan::CostModel::Link link_{0, 0};
  transport::JobInfo job_;
  std::unique_ptr<transport::Bootstrap> bootstrap_;
  std::shared_ptr<transport::Communicator> allreduce_, allgather_, zero_, tp_group_, tp_norms_;
  // The mesh chooser's: the world's and the groups it measured; kept with the others, which close
  // together when the job ends.
  std::shared_ptr<transport::Communicator> world_;
  std::vector<std::shared_ptr<transport::Communicator>> probes_;
};

}  // namespace troupe::apps
