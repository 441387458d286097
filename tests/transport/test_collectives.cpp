// Collectives on the in-process backend: 1-8 ranks as threads, odd sizes (1 element, primes, sizes
// not divisible by the rank count, chunk boundaries), every collective against a direct
// computation; disagreeing ranks fail together with one message; a silent rank times out by name.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <future>
#include <thread>

#include "kernels/reference.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"

using namespace troupe;
using namespace troupe::transport;

namespace {
// Runs body(group) on `n` rank threads; returns each rank's exception (null when it succeeded).
std::vector<std::exception_ptr> on_ranks(int n, const std::function<void(ProcessGroup&)>& body, std::size_t chunk = 64,
                                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  auto world = make_inprocess_world(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        world[static_cast<std::size_t>(r)]->timeout = timeout;
        ProcessGroup g(*world[static_cast<std::size_t>(r)], 0, chunk);
        body(g);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

Tensor rank_tensor(int rank, std::int64_t n, DType dtype = DType::f32) {
  return test::random_tensor({n}, 100 + static_cast<std::uint64_t>(rank)).to(dtype);
}

std::string message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}
}  // namespace

TEST(Collectives, AllReduceMatchesTheSumForEveryRankCountAndSize) {
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t size : {1, 2, 7, 13, 97, 1031}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, " + std::to_string(size) + " elements");
      std::vector<double> expected(static_cast<std::size_t>(size), 0.0);
      for (int r = 0; r < n; ++r) {
        const auto v = test::values(rank_tensor(r, size));
        for (std::size_t i = 0; i < v.size(); ++i) expected[i] += v[i];
      }
      std::vector<Tensor> results(static_cast<std::size_t>(n));
      const auto errors = on_ranks(n, [&](ProcessGroup& g) {
        Tensor t = rank_tensor(g.rank(), size);
        g.all_reduce(t);
        results[static_cast<std::size_t>(g.rank())] = t;
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_FALSE(errors[static_cast<std::size_t>(r)]) << message(errors[static_cast<std::size_t>(r)]);
        test::expect_close(results[static_cast<std::size_t>(r)], expected, {size}, 1e-5, 1e-5);
      }
    }
}

TEST(Collectives, MeanGatherScatterBroadcastAndPointToPoint) {
  for (int n : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    const std::int64_t k = 3;  // rows per rank in gather / scatter
    const auto errors = on_ranks(n, [&](ProcessGroup& g) {
      const int r = g.rank();
      // mean in f64
      Tensor m = Tensor::full({5}, static_cast<double>(r), DType::f64);
      g.all_reduce(m, ReduceOp::mean);
      for (double v : m.to_vector<double>()) EXPECT_NEAR(v, (n - 1) / 2.0, 1e-12);
      // all_gather: rank r contributes rows filled with r
      Tensor mine = Tensor::full({k, 2}, static_cast<double>(r));
      const auto gathered = g.all_gather(mine).to_vector<float>();
      ASSERT_EQ(gathered.size(), static_cast<std::size_t>(n * k * 2));
      for (int q = 0; q < n; ++q)
        for (int i = 0; i < k * 2; ++i) EXPECT_EQ(gathered[static_cast<std::size_t>(q * k * 2 + i)], q);
      // reduce_scatter: every rank holds [n*k] = index; rank r gets part r summed over ranks
      std::vector<float> idx(static_cast<std::size_t>(n * k));
      for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<float>(i);
      const auto part = g.reduce_scatter(Tensor::from_vector(idx, {n * k})).to_vector<float>();
      ASSERT_EQ(part.size(), static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) EXPECT_EQ(part[static_cast<std::size_t>(i)], static_cast<float>(n * (r * k + i)));
      // broadcast from the last rank
      Tensor b = Tensor::full({11}, static_cast<double>(r));
      g.broadcast(b, n - 1);
      for (float v : b.to_vector<float>()) EXPECT_EQ(v, n - 1);
      // point to point around the ring
      if (n > 1) {
        Tensor out = Tensor::full({4}, static_cast<double>(r)), in = Tensor::zeros({4});
        if (r % 2 == 0) {
          g.send(out, (r + 1) % n);
          g.recv(in, (r - 1 + n) % n);
        } else {
          g.recv(in, (r - 1 + n) % n);
          g.send(out, (r + 1) % n);
        }
        for (float v : in.to_vector<float>()) EXPECT_EQ(v, (r - 1 + n) % n);
      }
      g.barrier();
    });
    for (const auto& e : errors) EXPECT_FALSE(e) << message(e);
  }
}

TEST(Collectives, DisagreeingRanksAllFailWithOneMessage) {
  const auto errors = on_ranks(3, [&](ProcessGroup& g) {
    Tensor t = Tensor::zeros({g.rank() == 1 ? 9 : 10});
    g.all_reduce(t);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " did not notice";
    const std::string m = message(errors[static_cast<std::size_t>(r)]);
    EXPECT_NE(m.find("rank 1 all_reduce of 9"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 all_reduce of 10"), std::string::npos) << m;
  }
}

TEST(Collectives, ASilentRankTimesOutByName) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = on_ranks(
      2,
      [&](ProcessGroup& g) {
        if (g.rank() == 1) return;  // never joins the collective
        Tensor t = Tensor::zeros({4});
        g.all_reduce(t);
      },
      64, std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(errors[0]);
  EXPECT_NE(message(errors[0]).find("rank 1 sent nothing"), std::string::npos) << message(errors[0]);
}

TEST(Collectives, CommunicatorRunsQueuedCollectivesAndReportsCompletion) {
  auto world = make_inprocess_world(2);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : world) comms.push_back(std::make_unique<Communicator>(std::move(t), "allreduce", 0, 64));
  std::vector<Tensor> ts;
  std::vector<std::future<void>> done;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) {
      ts.push_back(Tensor::full({100}, r + 10.0 * k));
      auto promise = std::make_shared<std::promise<void>>();
      done.push_back(promise->get_future());
      comms[static_cast<std::size_t>(r)]->all_reduce(ts.back(), ReduceOp::sum, [promise](std::exception_ptr e) {
        if (e) promise->set_exception(e);
        else promise->set_value();
      });
    }
  for (auto& f : done) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    f.get();
  }
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(ts[static_cast<std::size_t>(r * 3 + k)].to_vector<float>()[0], 1 + 20.0f * k);
  // Bad input fails through the callback, and the communicator keeps serving.
  auto bad = comms[0]->submit([](ProcessGroup& g) { g.all_reduce(Tensor::zeros({2}, DType::i32)); });
  EXPECT_THROW(bad.get(), Error);
}

// A communicator whose last holder is a completion callback (a collective that finished, or failed
// when a peer died, after everyone else let go) is released on its own thread: the thread ends
// after the callback instead of joining itself, which threw from the destructor and terminated.
TEST(Collectives, ACommunicatorReleasedByItsOwnCallbackEndsItsThread) {
  auto world = make_inprocess_world(1);
  auto comm = std::make_shared<Communicator>(std::move(world[0]), "allreduce");
  const std::weak_ptr<Communicator> watch = comm;
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  std::atomic<bool> called{false};
  comm->submit([released](ProcessGroup&) { released.wait(); },
               [keep = comm, &called](std::exception_ptr) { called = true; });
  comm->submit([](ProcessGroup&) {}, [](std::exception_ptr) {});  // queued behind: dropped with it
  comm.reset();  // the first job's callback holds the last reference now
  go.set_value();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!watch.expired() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(called.load());
  EXPECT_TRUE(watch.expired()) << "the callback's reference was the last one";
}

namespace {

// Every variable JobInfo::from_environment reads, cleared.
void clear_launcher_environment() {
  for (const char* v : {"TROUPE_RANK", "TROUPE_WORLD_SIZE", "TROUPE_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_LAUNCH_NODE_IPADDR",
                        "SLURM_JOB_NODELIST", "PMIX_RANK", "TROUPE_MASTER_ADDR", "TROUPE_MASTER_PORT", "TROUPE_JOB_TOKEN",
                        "TROUPE_TIMEOUT"})
    ::unsetenv(v);
}

}  // namespace

// Rank, size and the ranks on this machine come from troupe-launch, else mpirun, else Slurm; a
// rank outside the world, more local ranks than ranks and a malformed number are refused by name.
TEST(Collectives, JobInfoReadsLauncherMpirunAndSlurm) {
  clear_launcher_environment();
  EXPECT_EQ(JobInfo::from_environment().source, "single process");
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  JobInfo j = JobInfo::from_environment();
  EXPECT_EQ(j.source, "slurm");
  EXPECT_EQ(j.rank, 3);
  EXPECT_EQ(j.size, 4);
  EXPECT_EQ(j.local_size, 1);
  ::setenv("SLURM_NTASKS_PER_NODE", "2", 1);
  EXPECT_EQ(JobInfo::from_environment().local_size, 2);
  ::setenv("SLURM_NTASKS_PER_NODE", "5", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error) << "more ranks on this machine than in the job";
  ::unsetenv("SLURM_NTASKS_PER_NODE");
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_EQ(JobInfo::from_environment().source, "mpirun");
  ::setenv("TROUPE_RANK", "0", 1);
  ::setenv("TROUPE_WORLD_SIZE", "2", 1);
  ::setenv("TROUPE_MASTER_PORT", "31000", 1);
  ::setenv("TROUPE_TIMEOUT", "7", 1);
  j = JobInfo::from_environment();
  EXPECT_EQ(j.source, "troupe-launch");
  EXPECT_EQ(j.local_size, 1);
  ::setenv("TROUPE_LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(JobInfo::from_environment().local_size, 2);
  ::unsetenv("TROUPE_LOCAL_WORLD_SIZE");
  EXPECT_EQ(j.master_port, 31000);
  EXPECT_EQ(j.timeout, std::chrono::milliseconds(7000));
  ::setenv("TROUPE_TIMEOUT", "0.25", 1);
  EXPECT_EQ(JobInfo::from_environment().timeout, std::chrono::milliseconds(250));
  for (const char* bad : {"0", "-3", "soon", "1e9"}) {
    ::setenv("TROUPE_TIMEOUT", bad, 1);
    EXPECT_THROW(JobInfo::from_environment(), Error) << "TROUPE_TIMEOUT=" << bad;
  }
  ::setenv("TROUPE_TIMEOUT", "7", 1);
  ::setenv("TROUPE_MASTER_PORT", "70000", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error) << "a port beyond 65535 must not wrap";
  ::setenv("TROUPE_MASTER_PORT", "31000", 1);
  ::setenv("TROUPE_RANK", "5", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error);
  ::setenv("TROUPE_RANK", "one", 1);
  EXPECT_THROW(JobInfo::from_environment(), Error);
  clear_launcher_environment();
}

// MPICH's and Intel MPI's PMI variables, a bare PMIx launcher (whose world size must be given),
// and the master from Slurm: its launch node, else the first node of the job's node list.
TEST(Collectives, JobInfoReadsPmiPmixAndSlurmsMaster) {
  clear_launcher_environment();
  ::setenv("PMI_RANK", "2", 1);
  ::setenv("PMI_SIZE", "4", 1);
  ::setenv("MPI_LOCALNRANKS", "2", 1);
  JobInfo j = JobInfo::from_environment();
  EXPECT_EQ(j.source, "pmi");
  EXPECT_EQ(j.rank, 2);
  EXPECT_EQ(j.size, 4);
  EXPECT_EQ(j.local_size, 2);
  EXPECT_EQ(j.master_addr, "127.0.0.1");
  clear_launcher_environment();
  ::setenv("PMIX_RANK", "1", 1);
  try {
    JobInfo::from_environment();
    ADD_FAILURE() << "a PMIx rank without a world size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set TROUPE_WORLD_SIZE"), std::string::npos) << e.what();
  }
  ::setenv("TROUPE_WORLD_SIZE", "3", 1);
  j = JobInfo::from_environment();
  EXPECT_EQ(j.source, "pmix");
  EXPECT_EQ(j.rank, 1);
  EXPECT_EQ(j.size, 3);
  clear_launcher_environment();
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_JOB_NODELIST", "node[07-09,12],gpu1", 1);
  EXPECT_EQ(JobInfo::from_environment().master_addr, "node07");
  ::setenv("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3", 1);
  EXPECT_EQ(JobInfo::from_environment().master_addr, "10.1.2.3");
  ::setenv("TROUPE_MASTER_ADDR", "10.9.9.9", 1);
  EXPECT_EQ(JobInfo::from_environment().master_addr, "10.9.9.9");
  clear_launcher_environment();
  EXPECT_EQ(first_slurm_host("gpu3"), "gpu3");
  EXPECT_EQ(first_slurm_host("a1,b2"), "a1");
  EXPECT_EQ(first_slurm_host("n[001-004]-ib,x"), "n001-ib");
  EXPECT_EQ(first_slurm_host("rack[5,7-9]"), "rack5");
  EXPECT_THROW(first_slurm_host("node[]"), Error);
  EXPECT_THROW(first_slurm_host("node[3-4"), Error);
}

namespace {

// Two ranks of one job on this machine, rank 0 at `master`.
std::vector<JobInfo> local_job(const std::string& master) {
  std::vector<JobInfo> job(2);
  const int port = free_local_port();
  for (int r = 0; r < 2; ++r) {
    job[static_cast<std::size_t>(r)].rank = r;
    job[static_cast<std::size_t>(r)].size = 2;
    job[static_cast<std::size_t>(r)].master_addr = master;
    job[static_cast<std::size_t>(r)].master_port = port;
    job[static_cast<std::size_t>(r)].token = "job-7";
  }
  return job;
}

// A connection to rank 0 of `job` from outside it, or -1 while rank 0 does not listen yet.
int stranger(const JobInfo& job) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(job.master_port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
  ::close(fd);
  return -1;
}

}  // namespace

// Strangers that connect first and send nothing, or a byte and then nothing, do not hold the job
// up: rank 0 reads every connection's hello side by side (each may take up to 5 s), so the ranks
// join as soon as they arrive.
TEST(Collectives, StrangersThatSendNothingDoNotDelayTheRendezvous) {
  auto job = local_job("127.0.0.1");
  const auto t0 = std::chrono::steady_clock::now();
  auto zero = std::async(std::launch::async, [&] {
    Bootstrap boot(job[0], std::chrono::seconds(20));
    return boot.all_gather("zero");
  });
  int silent = -1, one_byte = -1;
  for (int i = 0; i < 500 && silent < 0; ++i) {
    silent = stranger(job[0]);
    if (silent < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(silent, 0) << "rank 0 never listened";
  one_byte = stranger(job[0]);
  ASSERT_GE(one_byte, 0);
  ASSERT_EQ(::send(one_byte, "T", 1, MSG_NOSIGNAL), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both are accepted before rank 1 comes
  Bootstrap one(job[1], std::chrono::seconds(20));
  const auto from_one = one.all_gather("one");
  const auto from_zero = zero.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3)) << "the strangers delayed the job";
  EXPECT_EQ(from_zero, (std::vector<std::string>{"zero", "one"}));
  EXPECT_EQ(from_one, from_zero);
  ::close(silent);
  ::close(one_byte);
}

// The master may be named: rank 0 listens at, and the others reach, what the name resolves to;
// a name nothing resolves is refused saying so.
TEST(Collectives, TheMasterMayBeAHostName) {
  auto job = local_job("localhost");
  auto zero = std::async(std::launch::async, [&] { return Bootstrap(job[0], std::chrono::seconds(20)).all_gather("a"); });
  EXPECT_EQ(Bootstrap(job[1], std::chrono::seconds(20)).all_gather("b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(zero.get(), (std::vector<std::string>{"a", "b"}));
  auto nowhere = local_job("no-such-host.invalid");
  try {
    Bootstrap(nowhere[1], std::chrono::seconds(1));
    ADD_FAILURE() << "an unresolvable master was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-host.invalid' is neither an IPv4 address nor a host name"),
              std::string::npos)
        << e.what();
  }
}

// The pipelined ring posts several receives under one tag before waiting; they match the sends in
// order, and a receive of the wrong size fails naming the sender.
TEST(InProcessTransport, ReceivesPostedAheadMatchSendsInOrder) {
  auto world = make_inprocess_world(2);
  std::vector<std::vector<int>> sent = {{1, 2, 3}, {4}, {5, 6}}, got = {{0, 0, 0}, {0}, {0, 0}};
  std::vector<Request> sends, recvs;
  for (std::size_t k = 0; k < sent.size(); ++k) recvs.push_back(world[1]->post_recv(0, 9, got[k].data(), got[k].size() * sizeof(int)));
  for (std::size_t k = 0; k < sent.size(); ++k) sends.push_back(world[0]->post_send(1, 9, sent[k].data(), sent[k].size() * sizeof(int)));
  world[0]->wait(sends);
  world[1]->wait(recvs);
  EXPECT_EQ(got, sent);
  int one = 1;
  double wrong = 0;
  world[0]->send(1, 10, &one, sizeof one);
  try {
    world[1]->recv(0, 10, &wrong, sizeof wrong);
    FAIL() << "a 4-byte message was received as 8 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sent 4 bytes where 8 were expected"), std::string::npos) << e.what();
  }
}
