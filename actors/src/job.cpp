// The two kinds of job (troupe/actors/job.hpp): a launched job's processes, and virtual devices.
#include "troupe/actors/job.hpp"

#include <map>
#include <mutex>

#include "troupe/kernels/error.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"
#include "troupe/transport/subgroup.hpp"
#include "troupe/transport/ucx.hpp"

namespace troupe::actors {

namespace {

// A launched job: the rendezvous when the first communicator is made (so that a job refused for
// its size never waits for its peers), then one UCX transport per communicator.
class LaunchedJob final : public Job {
 public:
  explicit LaunchedJob(transport::JobInfo info)
      : Job(info.rank, info.size, info.source, info.local_size), info_(std::move(info)) {}

  std::shared_ptr<transport::Communicator> communicator(const std::vector<int>& members, const char* name,
                                                        std::uint32_t channel) override {
    if (!bootstrap_) bootstrap_ = std::make_unique<transport::Bootstrap>(info_, info_.timeout);
    std::unique_ptr<transport::Transport> world = transport::make_ucx_transport(*bootstrap_, info_.timeout);
    if (static_cast<int>(members.size()) < size()) world = transport::make_subgroup(std::move(world), members);
    return std::make_shared<transport::Communicator>(std::move(world), name, channel);
  }

 private:
  transport::JobInfo info_;
  std::unique_ptr<transport::Bootstrap> bootstrap_;
};

// What the virtual devices of one process share: the k-th communicator any of them makes is made
// of the k-th in-process world, created by whichever device asks first.
struct VirtualWorlds {
  std::mutex mutex;
  int devices = 0;
  std::map<std::size_t, std::vector<std::unique_ptr<transport::Transport>>> worlds;  // by call number, until all took theirs
  std::map<std::size_t, int> taken;

  std::unique_ptr<transport::Transport> take(std::size_t call, int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    auto& world = worlds[call];
    if (world.empty()) world = transport::make_inprocess_world(devices);
    std::unique_ptr<transport::Transport> mine = std::move(world[static_cast<std::size_t>(rank)]);
    if (++taken[call] == devices) {
      worlds.erase(call);
      taken.erase(call);
    }
    return mine;
  }
};

class VirtualDevice final : public Job {
 public:
  VirtualDevice(int rank, std::shared_ptr<VirtualWorlds> worlds)
      : Job(rank, worlds->devices, "virtual devices"), worlds_(std::move(worlds)) {}

  std::shared_ptr<transport::Communicator> communicator(const std::vector<int>& members, const char* name,
                                                        std::uint32_t channel) override {
    std::unique_ptr<transport::Transport> world = worlds_->take(calls_++, rank());
    if (static_cast<int>(members.size()) < size()) world = transport::make_subgroup(std::move(world), members);
    return std::make_shared<transport::Communicator>(std::move(world), name, channel);
  }

 private:
  std::shared_ptr<VirtualWorlds> worlds_;
  std::size_t calls_ = 0;
};

}  // namespace

std::shared_ptr<Job> Job::from_environment() { return std::make_shared<LaunchedJob>(transport::JobInfo::from_environment()); }

std::vector<std::shared_ptr<Job>> Job::virtual_devices(int devices) {
  TROUPE_CHECK(devices >= 1, invalid_argument, "virtual devices: asked for ", devices, "; give 1 or more");
  auto worlds = std::make_shared<VirtualWorlds>();
  worlds->devices = devices;
  std::vector<std::shared_ptr<Job>> jobs;
  for (int r = 0; r < devices; ++r) jobs.push_back(std::make_shared<VirtualDevice>(r, worlds));
  return jobs;
}

}  // namespace troupe::actors
