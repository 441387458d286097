// Two ranks of troupe-gpt --dp 2 (or --tp 2) started by hand, as mpirun or Slurm would start them
// (no troupe-launch to stop the survivor): one rank is killed (or stopped) at a random moment, from
// the rendezvous to mid-training, and the survivor must exit non-zero, naming the dead rank,
// within TROUPE_TIMEOUT plus a fixed bound, every time. The moments come from a fixed seed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "apps/app_runner.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/transport/bootstrap.hpp"

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kTimeoutS = 0.5;  // TROUPE_TIMEOUT of the ranks
// What the survivor may take beyond the timeout: cancelling (at most 0.5 s), printing, exiting;
// generous because ctest runs other suites on the same cores.
constexpr auto kBound = std::chrono::milliseconds(3000);

struct Rank {
  pid_t pid = -1;
  std::string log;
};

// Starts rank `rank` of a 2-rank job with the environment a launcher-less user sets by hand;
// `parallel` is "--dp" (data parallel), "--tp" (tensor parallel) or "--pp" (pipeline stages).
Rank start_rank(int rank, int port, const std::string& dir, const std::string& data, const char* parallel) {
  Rank r;
  r.log = dir + "/rank" + std::to_string(rank) + ".log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("TROUPE_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("TROUPE_WORLD_SIZE", "2", 1);
    ::setenv("TROUPE_MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("TROUPE_MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("TROUPE_JOB_TOKEN", "peer-death-test", 1);
    ::setenv("TROUPE_TIMEOUT", std::to_string(kTimeoutS).c_str(), 1);
    if (!std::freopen(r.log.c_str(), "w", stdout) || ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0) std::_Exit(126);
    const std::string bin = TROUPE_GPT_BIN;
    ::execl(bin.c_str(), bin.c_str(), "--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--seq", "16",
            "--batch", "4", "--threads", "1", "--steps", "1000000", "--eval-every", "0", "--val-batches", "1", parallel, "2",
            "--amp", "O0", "--data", data.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  r.pid = pid;
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One run: start both ranks, deliver `signal` to `victim` after `moment`, and check the survivor.
void kill_and_expect_clear_exit(int victim, int signal, std::chrono::milliseconds moment, const std::string& dir,
                                const std::string& data, const char* parallel) {
  const int port = transport::free_local_port();
  Rank ranks[2] = {start_rank(0, port, dir, data, parallel), start_rank(1, port, dir, data, parallel)};
  std::this_thread::sleep_for(moment);
  ::kill(ranks[victim].pid, signal);
  const Rank& survivor = ranks[1 - victim];
  const auto killed_at = Clock::now();
  int status = 0;
  bool exited = false;
  while (!(exited = ::waitpid(survivor.pid, &status, WNOHANG) == survivor.pid) &&
         Clock::now() - killed_at < std::chrono::milliseconds(static_cast<int>(kTimeoutS * 1000)) + kBound)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at);
  for (const Rank& r : ranks) ::kill(r.pid, SIGKILL);
  if (!exited) ::waitpid(survivor.pid, &status, 0);
  ::waitpid(ranks[victim].pid, nullptr, 0);
  const std::string log = read_file(survivor.log);
  ASSERT_TRUE(exited) << "the survivor hung for " << took.count() << " ms after rank " << victim << " got signal "
                      << signal << " at " << moment.count() << " ms:\n" << log;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0)
      << "the survivor crashed or exited 0 (status " << status << "):\n" << log;
  // The error line names the victim (the survivor's own rank prefixes some lines; only the victim's counts).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("troupe-gpt: [^\n]*error[^\n]*"))) << log;
  const std::string line = m.str();
  EXPECT_TRUE(std::regex_search(line, std::regex("rank(\\(s\\))? " + std::to_string(victim) + "\\b")))
      << "the error does not name rank " << victim << ": " << line;
}

void kill_at_random_moments(int victim, int signal, int runs, std::uint32_t seed, const char* parallel = "--dp") {
  const std::string dir = test::fresh_dir("peer_death_" + std::string(parallel + 2) + std::to_string(victim) + "_" +
                                          std::to_string(signal));
  const std::string data = dir + "/corpus.txt";
  std::ofstream(data) << apps::generated_corpus(20000);
  std::mt19937 rng(seed);
  // From the rendezvous (the first ~0.3 s) through the first training steps.
  std::uniform_int_distribution<int> moment_ms(0, 1500);
  for (int k = 0; k < runs; ++k) {
    const std::chrono::milliseconds moment(moment_ms(rng));
    SCOPED_TRACE("run " + std::to_string(k) + ", signal at " + std::to_string(moment.count()) + " ms");
    kill_and_expect_clear_exit(victim, signal, moment, dir, data, parallel);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace

TEST(PeerDeath, KillingRank1NeverHangsRank0) { kill_at_random_moments(1, SIGKILL, 20, 101); }

TEST(PeerDeath, KillingRank0TheRendezvousHostNeverHangsRank1) { kill_at_random_moments(0, SIGKILL, 20, 202); }

// A tensor-parallel rank that dies or stalls: its peer is waiting in one of the step's activation
// all-reduces (or at the rendezvous), and exits naming it.
TEST(PeerDeath, ATensorParallelPeerThatDiesOrStallsIsNamed) {
  kill_at_random_moments(1, SIGKILL, 4, 505, "--tp");
  kill_at_random_moments(0, SIGKILL, 3, 606, "--tp");
  kill_at_random_moments(1, SIGSTOP, 2, 707, "--tp");
}

// A pipeline stage that dies or stalls: its neighbour waits on an activation or gradient channel
// (or in the sum of the clipping norm, or for the loss) and exits naming it.
TEST(PeerDeath, APipelineStageThatDiesOrStallsIsNamed) {
  kill_at_random_moments(1, SIGKILL, 4, 808, "--pp");
  kill_at_random_moments(0, SIGKILL, 3, 909, "--pp");
  kill_at_random_moments(1, SIGSTOP, 2, 1010, "--pp");
}

// A stalled peer (SIGSTOP) answers nothing but keeps its connections open: only the timeout can
// catch it.
TEST(PeerDeath, AStoppedPeerIsCaughtByTheTimeout) {
  kill_at_random_moments(1, SIGSTOP, 3, 303);
  kill_at_random_moments(0, SIGSTOP, 3, 304);
}
