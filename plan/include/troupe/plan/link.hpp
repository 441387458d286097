#pragma once
// Start-up measurements of a job's links, and the data-parallel buckets they suggest.
// measure_link, measure_mesh_links and agree_on_means block their caller until the ranks have met,
// so a job calls them from its own thread before any step runs (ParallelTraining's constructor
// does), never from an actor's handler, which must not wait.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "troupe/plan/cost_model.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::plan {

/// The link of a group of ranks, measured: the latency of an all-reduce of a few bytes (the median
/// of 20) and the bandwidth each rank sends at in a 4 MiB one (2 (n-1)/n of it; the best of 3). A
/// collective of the communicator's ranks, every one calling it, which all get the ranks' mean (so
/// that they plan the same buckets); about 20 round trips and 12 MiB sent per rank (0.1 s over
/// 1 Gbit/s).
CostModel::Link measure_link(transport::Communicator& comm);

/// Makes a communicator of `members` (job ranks in group order, this rank among them) named
/// `name`: a collective of the whole job, every rank asking for its own group of one partition of
/// the ranks, in the same order.
using GroupMaker = std::function<std::shared_ptr<transport::Communicator>(const std::vector<int>& members, const char* name)>;

/// The links of the "tp" and "dp" axes of the dp x tp meshes of `world`'s ranks with tp in `tps`
/// (rank r is replica r / tp, shard r % tp), each measured on the groups that mesh would run on
/// (measure_link; every group of an axis at once, contending as in training), each figure the mean
/// over the job's ranks: CostModel::mesh_links, by mesh. A collective of `world`'s ranks.
std::map<std::string, std::map<std::string, CostModel::Link>> measure_mesh_links(transport::Communicator& world,
                                                                                 const std::vector<int>& tps,
                                                                                 const GroupMaker& group);

/// The ranks' mean of each of `figures` (a collective of the communicator's ranks, every one calling
/// it): what each rank measured (its link, its GFLOP/s) made one set of figures, so that every rank
/// plans alike.
std::vector<double> agree_on_means(transport::Communicator& comm, const std::vector<double>& figures);

/// The data-parallel buckets for a link: how large a bucket may grow and how large the first is.
struct BucketSizes {
  double fusion_mb = 64, first_mb = 1;
};
/// Buckets whose latency is at most 1% of their transfer (fusion: 99 x latency x bandwidth, within
/// 0.25-64 MiB), so they cost what one large transfer costs while each starts as soon as backward
/// fills it; the first 1 MiB, or the fusion size when smaller. Over shared memory (17 us, 6.4 GB/s)
/// that is 10 MiB; over 1 Gbit/s TCP (95 us, 120 MB/s) 1.1 MiB: the fastest sizes measured on each
/// (docs/PERFORMANCE.md).
BucketSizes choose_buckets(const CostModel::Link& link);

}  // namespace troupe::plan
