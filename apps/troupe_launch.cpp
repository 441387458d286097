// troupe-launch: starts N local ranks of a command and supervises them.
//   troupe-launch -n N [--timeout S] [--master-addr A] [--port P] [--max-restarts K] [--] CMD ARGS...
// Each rank gets TROUPE_RANK, TROUPE_WORLD_SIZE, TROUPE_LOCAL_WORLD_SIZE, TROUPE_MASTER_ADDR, TROUPE_MASTER_PORT, a random
// TROUPE_JOB_TOKEN shared by the job, TROUPE_TIMEOUT and TROUPE_RESTART (0, then 1, 2, ... on restarts); its output
// lines are prefixed "[rank k]". When a rank fails, the others are stopped; the whole job starts again up to K
// times, else troupe-launch exits with that rank's code.
#include <CLI/CLI.hpp>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "troupe/apps/cli.hpp"
#include "troupe/transport/bootstrap.hpp"

namespace {

struct Rank {
  pid_t pid = -1;
  int out = -1;        // read end of its stdout+stderr
  std::string partial;  // an unfinished output line
  bool running = true;
  int status = 0;
};

std::string random_token() {
  unsigned char bytes[16] = {};
  std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(bytes), sizeof bytes);
  std::string hex;
  char buf[3];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  return hex;
}

// Prints the complete lines of `chunk` with the rank's prefix; keeps the rest for later.
void forward(int rank, Rank& r, const char* chunk, std::size_t n, bool flush) {
  r.partial.append(chunk, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = r.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    std::printf("[rank %d] %.*s\n", rank, static_cast<int>(nl - start), r.partial.data() + start);
  r.partial.erase(0, start);
  if (flush && !r.partial.empty()) {
    std::printf("[rank %d] %s\n", rank, r.partial.c_str());
    r.partial.clear();
  }
  std::fflush(stdout);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

// Starts the ranks (attempt `restart` of the job: 0 first) and supervises them; returns the job's
// exit code.
int launch_once(int n, int port, int timeout_s, const std::string& master, std::vector<std::string> command, int restart) {
  if (port == 0) port = troupe::transport::free_local_port();
  const std::string token = random_token();

  std::vector<Rank> ranks(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("troupe-launch: pipe");
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own process group, so stopping a rank stops everything it started
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv("TROUPE_RANK", std::to_string(k).c_str(), 1);
      ::setenv("TROUPE_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("TROUPE_LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);  // every rank on this machine
      ::setenv("TROUPE_MASTER_ADDR", master.c_str(), 1);
      ::setenv("TROUPE_MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TROUPE_JOB_TOKEN", token.c_str(), 1);
      ::setenv("TROUPE_TIMEOUT", std::to_string(timeout_s).c_str(), 1);
      ::setenv("TROUPE_RESTART", std::to_string(restart).c_str(), 1);
      std::vector<char*> args;
      for (auto& a : command) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "troupe-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
      std::_Exit(127);
    }
    ::close(fds[1]);
    ranks[static_cast<std::size_t>(k)].pid = pid;
    ranks[static_cast<std::size_t>(k)].out = fds[0];
  }

  int failed = -1, exit_code = 0;
  std::chrono::steady_clock::time_point kill_at{};
  for (int alive = n; alive > 0;) {
    std::vector<pollfd> pfds;
    for (auto& r : ranks)
      if (r.out >= 0) pfds.push_back({r.out, POLLIN, 0});
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 50);
    else ::usleep(20000);
    for (int k = 0; k < n; ++k) {
      Rank& r = ranks[static_cast<std::size_t>(k)];
      if (r.out >= 0) {
        pollfd p{r.out, POLLIN, 0};
        while (::poll(&p, 1, 0) > 0) {
          char buf[4096];
          const ssize_t got = ::read(r.out, buf, sizeof buf);
          if (got <= 0) {
            forward(k, r, "", 0, true);
            ::close(r.out);
            r.out = -1;
            break;
          }
          forward(k, r, buf, static_cast<std::size_t>(got), false);
        }
      }
      if (r.running && ::waitpid(r.pid, &r.status, WNOHANG) == r.pid) {
        r.running = false;
        --alive;
        const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
        if (!ok && failed < 0) {
          failed = k;
          exit_code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
          std::fprintf(stderr, "troupe-launch: rank %d %s; stopping the other ranks\n", k, describe(r.status).c_str());
          for (auto& o : ranks)
            if (o.running) ::kill(-o.pid, SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        }
      }
    }
    if (failed >= 0 && std::chrono::steady_clock::now() > kill_at)
      for (auto& o : ranks)
        if (o.running) ::kill(-o.pid, SIGKILL);  // did not stop on SIGTERM
  }
  // What is still buffered; a leftover child of a rank may hold the pipe open, so do not wait for EOF.
  for (int k = 0; k < n; ++k) {
    Rank& r = ranks[static_cast<std::size_t>(k)];
    if (r.out < 0) continue;
    pollfd p{r.out, POLLIN, 0};
    char buf[4096];
    for (ssize_t got; ::poll(&p, 1, 0) > 0 && (got = ::read(r.out, buf, sizeof buf)) > 0;)
      forward(k, r, buf, static_cast<std::size_t>(got), false);
    forward(k, r, "", 0, true);
    ::close(r.out);
    if (failed >= 0) ::kill(-r.pid, SIGKILL);
  }
  if (failed < 0) return 0;
  return exit_code != 0 ? exit_code : 1;
}

// Runs the job; when a rank fails (the others already stopped), starts the whole job again, up to
// `max_restarts` times, each rank resuming from the job's last checkpoint (TROUPE_RESTART tells it).
int launch(int n, int port, int timeout_s, const std::string& master, const std::vector<std::string>& command,
           int max_restarts) {
  for (int restart = 0;; ++restart) {
    const int code = launch_once(n, port, timeout_s, master, command, restart);
    if (code == 0 || restart == max_restarts) return code;
    std::fprintf(stderr, "troupe-launch: restarting the job (restart %d of %d)\n", restart + 1, max_restarts);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"troupe-launch: start N local ranks of a command (TROUPE_RANK, TROUPE_WORLD_SIZE, ... set for each)"};
  int n = 1, port = 0, timeout_s = 30, max_restarts = 0;
  std::string master = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("-n,--nproc", n, "number of ranks")->required()->check(troupe::apps::in_range(1, 1024, "ranks on this machine"));
  app.add_option("--timeout", timeout_s, "seconds a rank waits for a peer before failing (TROUPE_TIMEOUT)")
      ->capture_default_str()->check(troupe::apps::in_range(1, 86400, "seconds"));
  app.add_option("--master-addr", master, "address rank 0 listens on")->capture_default_str();
  app.add_option("--port", port, "rendezvous port (0 = a free one)")->capture_default_str()
      ->check(troupe::apps::in_range(0, 65535, "a TCP port; 0 = a free one"));
  app.add_option("--max-restarts", max_restarts,
                 "times to start the whole job again after a rank fails; each rank resumes from the last checkpoint")
      ->capture_default_str()->check(troupe::apps::in_range(0, 1000, "restarts"));
  app.add_option("command", command, "the program and its arguments")->required();
  app.positionals_at_end(true);
  return troupe::apps::run_cli(app, argc, argv, "troupe-launch", [&] { return launch(n, port, timeout_s, master, command, max_restarts); });
}
