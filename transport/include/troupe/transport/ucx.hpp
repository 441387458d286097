#pragma once
// The UCX backend: ranks as processes or hosts, over whatever UCX selects (shared memory, CMA, TCP,
// RDMA). Worker addresses are exchanged through the Bootstrap; messages are UCX tagged sends. A peer
// that dies is reported by UCX's peer-failure handling (or, at the latest, by the timeout) as an
// error naming its rank.

#include <memory>

#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/transport.hpp"

namespace troupe::transport {

/// Connects this rank to every other over UCX. Collective: every rank calls it once per transport
/// (a job may create several, one per communicator, so they do not contend).
std::unique_ptr<Transport> make_ucx_transport(Bootstrap& bootstrap, std::chrono::milliseconds timeout);

}  // namespace troupe::transport
