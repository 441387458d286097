#pragma once
// What an Engine owns: the actor system and its configuration (engine.cpp, and the planner actor,
// which spawns on it).
#include <caf/all.hpp>

#include <memory>

#include "troupe/actors/engine.hpp"

namespace troupe::actors {

struct Engine::Impl {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::size_t threads = 1;
};

}  // namespace troupe::actors
