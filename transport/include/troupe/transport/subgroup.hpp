#pragma once
// A group of some of a job's ranks as a transport of its own: the tensor-parallel ranks of one
// data-parallel replica, or the data-parallel ranks of one shard. Collectives (process_group.hpp)
// run on it as on a world; errors name the ranks of the job, as the world transport does.

#include <memory>
#include <vector>

#include "troupe/transport/transport.hpp"

namespace troupe::transport {

/// `world` restricted to `members` (job ranks, in group rank order; this rank among them): group
/// rank r is job rank members[r]. Takes the world transport, which then serves this group alone.
std::unique_ptr<Transport> make_subgroup(std::unique_ptr<Transport> world, std::vector<int> members);

}  // namespace troupe::transport
