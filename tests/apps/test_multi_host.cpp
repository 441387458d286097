// Two hosts on one machine: network namespaces joined by a veth pair shaped to 1 Gbit/s (as
// bench/netns.sh makes them), one rank of troupe-gpt --dp 2 in each, UCX over TCP through the link.
// A job across them trains like one process; cutting the link mid-step makes both ranks fail
// naming each other within the timeout. Making namespaces needs root (CAP_SYS_ADMIN); elsewhere
// the tests skip, saying so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "apps/app_runner.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/models/weights.hpp"

using namespace troupe;

namespace {

const std::string kGpt = TROUPE_GPT_BIN;

// The two hosts, made for one test and removed after it; names and subnet from the process id, so
// suites running side by side do not meet.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(::getpid());
    for (int h = 0; h < 2; ++h) {
      ns_[h] = "tmh" + id + std::to_string(h);
      dev_[h] = "tmh" + id + (h == 0 ? "a" : "b");
      ip_[h] = "10.79." + std::to_string(::getpid() % 250) + "." + std::to_string(h + 1);
    }
    const std::string errors = test::fresh_dir("multi_host_setup_" + id) + "/ip.err";
    const auto sh = [&](const std::string& cmd) { return std::system((cmd + " 2>" + errors).c_str()) == 0; };
    if (!sh("ip netns add " + ns_[0])) {
      std::ifstream err(errors);
      std::getline(err, why_);
      return;
    }
    made_ = sh("ip netns add " + ns_[1]) && sh("ip link add " + dev_[0] + " type veth peer name " + dev_[1]);
    for (int h = 0; h < 2 && made_; ++h)
      made_ = sh("ip link set " + dev_[h] + " netns " + ns_[h]) &&
              sh("ip -n " + ns_[h] + " addr add " + ip_[h] + "/24 dev " + dev_[h]) && sh("ip -n " + ns_[h] + " link set lo up") &&
              sh("ip -n " + ns_[h] + " link set " + dev_[h] + " up") &&
              sh("ip netns exec " + ns_[h] + " tc qdisc add dev " + dev_[h] + " root tbf rate 1gbit burst 256kb latency 100ms");
    if (!made_) why_ = "setting up the veth link between the namespaces failed";
  }
  ~TwoHosts() {
    for (const std::string& ns : ns_) std::system(("ip netns del " + ns + " 2>/dev/null").c_str());
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  /// Empty when the hosts exist, else why they could not be made.
  std::string unavailable() const { return made_ ? "" : "no network namespaces here (" + why_ + "); they need root"; }
  /// The shell command running rank `rank` of a 2-rank job of `args` on host `rank`, rank 0's
  /// host holding the rendezvous; its output goes to `log`.
  std::string rank(int rank, const std::string& args, double timeout_s, const std::string& log) const {
    return "ip netns exec " + ns_[rank] + " env TROUPE_RANK=" + std::to_string(rank) +
           " TROUPE_WORLD_SIZE=2 TROUPE_MASTER_ADDR=" + ip_[0] + " TROUPE_MASTER_PORT=29600 TROUPE_JOB_TOKEN=hosts"
           " TROUPE_TIMEOUT=" + std::to_string(timeout_s) + " UCX_TLS=tcp,self UCX_NET_DEVICES=" + dev_[rank] + " " + kGpt +
           args + " > " + log + " 2>&1";
  }
  /// The shell command that cuts the link (host 0's end down).
  std::string cut() const { return "ip -n " + ns_[0] + " link set " + dev_[0] + " down"; }

 private:
  std::string ns_[2], dev_[2], ip_[2], why_;
  bool made_ = false;
};

std::string corpus(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << apps::generated_corpus(40000);
  return path;
}

std::string read_file(const std::string& path) { return models::read_text_file(path, "a file the test's shell wrote"); }

const std::string kModel = " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --threads 1 --amp O0";

}  // namespace

TEST(MultiHost, DataParallelAcrossTwoHostsEqualsOneProcess) {
  TwoHosts hosts;
  if (!hosts.unavailable().empty()) GTEST_SKIP() << hosts.unavailable();
  const std::string dir = test::fresh_dir("multi_host_dp"), data = corpus(dir);
  const std::string common = kModel + " --lr 3e-3 --eval-every 100 --steps 10 --comm-fusion-mb 0.01 --data " + data;
  ASSERT_EQ(test::run_app(kGpt + common + " --batch 8 --metrics " + dir + "/single.csv").exit_code, 0);
  const std::string args = common + " --batch 4 --dp 2 --metrics " + dir + "/hosts.csv";
  const auto run = test::run_app("(" + hosts.rank(1, args, 20, dir + "/r1.log") + ") & " + hosts.rank(0, args, 20, dir + "/r0.log") +
                                 "; a=$?; wait $!; b=$?; exit $((a | b))");
  ASSERT_EQ(run.exit_code, 0) << read_file(dir + "/r0.log") << read_file(dir + "/r1.log");
  EXPECT_NE(read_file(dir + "/r1.log").find("replica 1 of 2"), std::string::npos);
  const auto single = test::csv_column(dir + "/single.csv", "loss"), across = test::csv_column(dir + "/hosts.csv", "loss");
  ASSERT_EQ(across.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_NEAR(across[i], single[i], 1e-5 * std::abs(single[i])) << "step " << i + 1;
}

TEST(MultiHost, CuttingTheLinkMidStepFailsBothRanksNamingThePeer) {
  TwoHosts hosts;
  if (!hosts.unavailable().empty()) GTEST_SKIP() << hosts.unavailable();
  const std::string dir = test::fresh_dir("multi_host_cut"), data = corpus(dir);
  const std::string args = kModel + " --batch 4 --dp 2 --eval-every 0 --steps 1000000 --data " + data;
  constexpr double kTimeoutS = 1;
  // Once both ranks are 10 steps into training the link goes down, and both must be gone within
  // the timeout and a bound (cancelling, printing, exiting; generous, as ctest shares the cores).
  const std::string r0 = dir + "/r0.log";
  const auto run = test::run_app("(" + hosts.rank(1, args, kTimeoutS, dir + "/r1.log") + "; echo $? > " + dir + "/r1.code) & (" +
                                 hosts.rank(0, args, kTimeoutS, r0) + "; echo $? > " + dir + "/r0.code) & "
                                 "for i in $(seq 600); do grep -q '^step 10/' " + r0 + " 2>/dev/null && break; sleep 0.05; done; " +
                                 hosts.cut() + "; date +%s.%N > " + dir + "/cut; wait; date +%s.%N > " + dir + "/end");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const double took = std::stod(read_file(dir + "/end")) - std::stod(read_file(dir + "/cut"));
  EXPECT_LT(took, kTimeoutS + 4) << "the ranks outlived the cut link by " << took << " s";
  for (int r = 0; r < 2; ++r) {
    const std::string log = read_file(dir + "/r" + std::to_string(r) + ".log");
    EXPECT_NE(std::stoi(read_file(dir + "/r" + std::to_string(r) + ".code")), 0) << "rank " << r << " did not fail";
    EXPECT_NE(log.find("rank " + std::to_string(1 - r) + " did not complete within"), std::string::npos)
        << "rank " << r << " did not name its peer:\n" << log;
  }
}
