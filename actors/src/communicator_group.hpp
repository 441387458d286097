#pragma once
// A device's collective group along one mesh axis over a transport communicator
// (communicator_group() in troupe/actors/tensor_parallel.hpp): the collectives run on the
// communicator's thread in its queue's order, and show on a track of their own in traces.

#include <cstdint>
#include <memory>
#include <string>

#include "troupe/graph/collectives.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// The collective group over `comm`, named `axis` in errors ("tp").
class CommunicatorGroup : public graph::CollectiveGroup {
 public:
  CommunicatorGroup(std::shared_ptr<transport::Communicator> comm, std::string axis);
  int rank() const override;
  int size() const override;
  void submit(std::function<void(graph::CollectiveWire&)> work, graph::CollectiveDone done) override;
  std::string name() const override;
  /// The communicator thread's track in traces, where the collectives show.
  std::uint32_t track() const { return track_; }

 private:
  std::shared_ptr<transport::Communicator> comm_;
  std::string axis_;
  std::uint32_t track_;
};

}  // namespace troupe::actors
