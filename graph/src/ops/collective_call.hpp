#pragma once
// What the ops that meet other devices share (collective.cpp, point_to_point.cpp): their call on
// the group named by the node's "group" attribute, in the parts OpDef::collective asks for.

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "troupe/graph/collectives.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph::detail {

/// The call of op `op` on the node's group: `wire` runs on the group's thread, from and into
/// `state`'s tensors, and `finish` makes the outputs from them and takes them all back (so none
/// is freed on the group's thread). A failure on the wire names the op and the group.
template <class State, class Wire, class Finish>
CollectiveCall call_on_group(const char* op, const ComputeContext& c, State state, Wire wire, Finish finish) {
  std::shared_ptr<CollectiveGroup> group = collective_group(static_cast<int>(c.attrs.get_int("group")));
  auto shared = std::make_shared<State>(std::move(state));
  std::string where = std::string(op) + " on " + group->name();
  return {std::move(group), [shared, wire](CollectiveWire& w) { wire(w, *shared); },
          [shared, finish, where = std::move(where)](std::exception_ptr failure) {
            State taken = std::exchange(*shared, State{});
            if (failure) {
              try {
                std::rethrow_exception(failure);
              } catch (const Error& e) {
                throw Error(e.kind(), where + ": " + e.message());
              }
            }
            return finish(std::move(taken));
          }};
}

}  // namespace troupe::graph::detail
