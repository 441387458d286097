#pragma once
// The collectives a sharded step's graph calls (graph/spmd.hpp): the communication between the
// devices of one mesh axis that a change of placement needs. The graph layer does not know how
// devices talk: the runtime registers a CollectiveGroup per mesh axis of each device (actors/ does
// it over transport's communicators; tests over in-process ones), and the collective ops find it
// by the id in their "group" attribute.

#include <memory>
#include <string>

#include "troupe/kernels/tensor.hpp"

namespace troupe::graph {

/// The devices of one mesh axis as one of them sees it, and the collectives among them. Every
/// device of the group must call the same collectives in the same order (a sharded step's
/// collective ops are chained so that they do).
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  /// This device's index along the axis.
  virtual int rank() const = 0;
  /// The axis's device count.
  virtual int size() const = 0;
  /// The sum over the devices of a dense floating tensor, written into it (bf16 and f16 summed in
  /// f32 and rounded once).
  virtual void all_reduce(const Tensor& tensor) = 0;
  /// Every device's dense tensor, concatenated along dim 0 in device order.
  virtual Tensor all_gather(const Tensor& tensor) = 0;
  /// The sum over the devices of a dense [size * k, ...] tensor, of which this device keeps part
  /// `rank` (bf16 and f16 as all_reduce sums them).
  virtual Tensor reduce_scatter(const Tensor& tensor) = 0;
  /// The group in errors: "tp (rank 1 of 2)".
  virtual std::string name() const = 0;
};

/// A group's registration: while it lives, collective ops whose "group" attribute is id() run on it.
class GroupRegistration {
 public:
  explicit GroupRegistration(std::shared_ptr<CollectiveGroup> group);
  ~GroupRegistration();
  GroupRegistration(const GroupRegistration&) = delete;
  GroupRegistration& operator=(const GroupRegistration&) = delete;
  /// The id collective ops name the group by.
  int id() const { return id_; }
  /// The group.
  const std::shared_ptr<CollectiveGroup>& group() const { return group_; }

 private:
  std::shared_ptr<CollectiveGroup> group_;
  int id_;
};

/// The group registered under `id`; an error naming the id when none is (its registration died).
std::shared_ptr<CollectiveGroup> collective_group(int id);

}  // namespace troupe::graph
