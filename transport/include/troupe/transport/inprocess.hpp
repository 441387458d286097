#pragma once
// The in-process backend: N ranks as threads of one process exchanging through shared mailboxes.
// For tests (1-8 ranks in one ctest) and for virtual devices on one machine.

#include <memory>
#include <vector>

#include "troupe/transport/transport.hpp"

namespace troupe::transport {

/// Creates the transports of `size` ranks that talk to each other; hand transports[r] to rank r's thread.
std::vector<std::unique_ptr<Transport>> make_inprocess_world(int size);

}  // namespace troupe::transport
