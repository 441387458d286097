// The UCX backend with 2-4 real processes on loopback (forked from the test; each child joins the
// job through the Bootstrap, runs collectives and reports by exit code and a message file):
// collectives are correct, a wrong job token is refused, a rank that never arrives and a rank that
// dies mid-job are named in the others' errors within the timeout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "troupe/kernels/error.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/process_group.hpp"
#include "troupe/transport/ucx.hpp"

using namespace troupe;
using namespace troupe::transport;

namespace {
// Named after the test process (the parent), so parent and children agree on the path.
std::string message_file(pid_t parent, int rank) {
  return ::testing::TempDir() + "/troupe_ucx_" + std::to_string(parent) + "_" + std::to_string(rank);
}

struct Outcome {
  int exit_code;
  std::string message;
};

// Forks `n` ranks running body(job, rank); waits at most `limit` for all. A child exits 0 on
// success, 1 with its error message written to its message file.
std::vector<Outcome> run_job(int n, const std::function<void(JobInfo&)>& body, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const int port = free_local_port();
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      JobInfo job;
      job.rank = r;
      job.size = n;
      job.master_port = port;
      job.token = "secret";
      int code = 0;
      try {
        body(job);
      } catch (const std::exception& e) {
        std::ofstream(message_file(parent, r)) << e.what();
        code = 1;
      }
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<Outcome> out(static_cast<std::size_t>(n), Outcome{-1, ""});
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ADD_FAILURE() << "rank " << r << " hung";
        ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    out[static_cast<std::size_t>(r)].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(message_file(parent, r));
    std::stringstream s;
    s << in.rdbuf();
    out[static_cast<std::size_t>(r)].message = s.str();
    std::remove(message_file(parent, r).c_str());
  }
  return out;
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}
}  // namespace

TEST(Ucx, CollectivesAcrossProcesses) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " processes");
    const auto out = run_job(n, [](JobInfo& job) {
      Bootstrap boot(job, std::chrono::seconds(20));
      auto transport = make_ucx_transport(boot, std::chrono::seconds(20));
      ProcessGroup g(*transport, 0, 4096);
      for (std::int64_t size : {1, 13, 1031, 100003}) {
        // Values vary along the tensor, so a chunk reduced into the wrong place would show.
        std::vector<float> mine(static_cast<std::size_t>(size));
        for (std::int64_t i = 0; i < size; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>((job.rank + 1) * (i % 97));
        Tensor t = Tensor::from_vector(mine, {size});
        g.all_reduce(t);
        const auto got = t.to_vector<float>();
        for (std::int64_t i = 0; i < size; ++i) {
          const float want = static_cast<float>(job.size * (job.size + 1) / 2 * (i % 97));
          expect(got[static_cast<std::size_t>(i)] == want, "all_reduce of " + std::to_string(size) + " at " + std::to_string(i) +
                                                               " gave " + std::to_string(got[static_cast<std::size_t>(i)]));
        }
      }
      const auto gathered = g.all_gather(Tensor::full({2}, static_cast<double>(job.rank))).to_vector<float>();
      for (int q = 0; q < job.size; ++q) expect(gathered[static_cast<std::size_t>(2 * q)] == q, "all_gather");
      Tensor b = Tensor::full({7}, static_cast<double>(job.rank));
      g.broadcast(b, 0);
      expect(b.to_vector<float>()[6] == 0, "broadcast");
      g.barrier();
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[static_cast<std::size_t>(r)].exit_code, 0) << "rank " << r << ": " << out[static_cast<std::size_t>(r)].message;
  }
}

// The pipelined ring posts several receives under one tag before waiting; they must match the
// sends in order, for eager and rendezvous (large) messages alike.
TEST(Ucx, ReceivesPostedAheadMatchSendsInOrder) {
  const auto out = run_job(2, [](JobInfo& job) {
    Bootstrap boot(job, std::chrono::seconds(20));
    auto transport = make_ucx_transport(boot, std::chrono::seconds(20));
    const std::vector<std::size_t> sizes = {8, 1 << 20, 100, 3 << 20, 4096, 1 << 20};
    std::vector<std::vector<char>> bufs;
    for (std::size_t k = 0; k < sizes.size(); ++k) bufs.emplace_back(sizes[k], job.rank == 0 ? static_cast<char>('a' + k) : 0);
    std::vector<Request> reqs;
    for (std::size_t k = 0; k < sizes.size(); ++k)
      reqs.push_back(job.rank == 0 ? transport->post_send(1, 7, bufs[k].data(), sizes[k]) : transport->post_recv(0, 7, bufs[k].data(), sizes[k]));
    transport->wait(reqs);
    for (std::size_t k = 0; k < sizes.size(); ++k)
      expect(bufs[k].front() == 'a' + static_cast<int>(k) && bufs[k].back() == 'a' + static_cast<int>(k),
             "message " + std::to_string(k) + " landed out of order");
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(out[static_cast<std::size_t>(r)].exit_code, 0) << "rank " << r << ": " << out[static_cast<std::size_t>(r)].message;
}

TEST(Ucx, MismatchedSizesFailEveryRankWithoutHanging) {
  const auto out = run_job(2, [](JobInfo& job) {
    Bootstrap boot(job, std::chrono::seconds(20));
    auto transport = make_ucx_transport(boot, std::chrono::seconds(5));
    ProcessGroup g(*transport);
    Tensor t = Tensor::zeros({job.rank == 0 ? 100 : 101});
    g.all_reduce(t);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[static_cast<std::size_t>(r)].exit_code, 1);
    EXPECT_NE(out[static_cast<std::size_t>(r)].message.find("rank 1 all_reduce of 101"), std::string::npos)
        << out[static_cast<std::size_t>(r)].message;
  }
}

TEST(Ucx, AWrongJobTokenIsRefused) {
  const auto out = run_job(2, [](JobInfo& job) {
    if (job.rank == 1) job.token = "guess";
    Bootstrap boot(job, std::chrono::milliseconds(1500));
    boot.all_gather("x");
  });
  EXPECT_EQ(out[0].exit_code, 1);
  EXPECT_NE(out[0].message.find("rank(s) 1"), std::string::npos) << out[0].message;
  EXPECT_NE(out[0].message.find("never arrived"), std::string::npos) << out[0].message;
  EXPECT_EQ(out[1].exit_code, 1) << "the refused rank must not think it joined";
}

// By the timeout (the default, shared-memory transports) and by UCX's peer-failure handling
// (TROUPE_UCX_PEER_FAILURE=1, TCP).
TEST(Ucx, ARankThatDiesMidJobIsNamedWithinTheTimeout) {
  for (const char* detect : {"0", "1"}) {
    SCOPED_TRACE(std::string("TROUPE_UCX_PEER_FAILURE=") + detect);
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = run_job(3, [detect](JobInfo& job) {
      ::setenv("TROUPE_UCX_PEER_FAILURE", detect, 1);
      Bootstrap boot(job, std::chrono::seconds(20));
      auto transport = make_ucx_transport(boot, std::chrono::seconds(3));
      ProcessGroup g(*transport);
      Tensor t = Tensor::zeros({1000});
      g.all_reduce(t);  // the first step works
      if (job.rank == 2) std::_Exit(3);  // then rank 2 dies, as if killed
      g.all_reduce(t);
    });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
    EXPECT_EQ(out[2].exit_code, 3);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out[static_cast<std::size_t>(r)].exit_code, 1) << "rank " << r << " did not notice";
      EXPECT_NE(out[static_cast<std::size_t>(r)].message.find("rank 2"), std::string::npos)
          << "rank " << r << ": " << out[static_cast<std::size_t>(r)].message;
    }
  }
}

// A rendezvous send to a stopped peer never completes and cannot be cancelled; the failing wait
// must still return within its timeout plus the cancel bound, and destroying the transport with
// that request open must neither crash nor hang.
TEST(Ucx, ASendToAStoppedPeerFailsAndTearsDownWithinABound) {
  const auto out = run_job(2, [](JobInfo& job) {
    Bootstrap boot(job, std::chrono::seconds(20));
    const auto pids = boot.all_gather(std::to_string(::getpid()));
    auto transport = make_ucx_transport(boot, std::chrono::milliseconds(800));
    ProcessGroup(*transport).barrier();
    if (job.rank == 1) {
      ::raise(SIGSTOP);  // rank 0 kills it once done
      return;
    }
    std::vector<char> big(8 << 20, 'x');  // well past UCX's eager limit: a rendezvous send
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      transport->send(1, 5, big.data(), big.size());
    } catch (const Error& e) {
      error = e.what();
    }
    transport.reset();
    const auto took = std::chrono::steady_clock::now() - t0;
    ::kill(std::stoi(pids[1]), SIGKILL);
    expect(error.find("sending to rank 1 did not complete") != std::string::npos, "unexpected error: " + error);
    expect(took < std::chrono::milliseconds(800 + 1500),
           "failing and tearing down took " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) + " ms");
  });
  EXPECT_EQ(out[0].exit_code, 0) << out[0].message;
}
