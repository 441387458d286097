// The load generator of `bench/run serve`: CONCURRENCY clients, each on its own keep-alive
// connection to 127.0.0.1:PORT, send POST ROUTE with the bytes of BODY_FILE until REQUESTS have been
// sent in all; prints one JSON line: throughput, p50/p99 latency, and the requests that did not
// get 200 (503s counted apart).
// usage: troupe-bench-serve-load PORT ROUTE BODY_FILE CONCURRENCY REQUESTS
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "troupe/apps/serve/http_client.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: troupe-bench-serve-load PORT ROUTE BODY_FILE CONCURRENCY REQUESTS\n");
    return 2;
  }
  const auto port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  const std::string route = argv[2];
  std::ifstream in(argv[3], std::ios::binary);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int concurrency = std::atoi(argv[4]), total = std::atoi(argv[5]);
  std::atomic<int> next{0}, failed{0}, busy{0};
  std::mutex mutex;
  std::vector<double> latencies_ms;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c)
    clients.emplace_back([&] {
      std::vector<double> mine;
      try {
        troupe::apps::serve::HttpClient client(port);
        while (next++ < total) {
          const auto start = std::chrono::steady_clock::now();
          const auto r = client.send(boost::beast::http::verb::post, route, body);
          mine.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
          if (r.result_int() == 503) ++busy;
          if (r.result_int() != 200) ++failed;
        }
      } catch (const std::exception&) {
        ++failed;  // a connection the server dropped
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  for (std::thread& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const auto at = [&](double q) {
    return latencies_ms.empty() ? 0.0 : latencies_ms[std::min(latencies_ms.size() - 1, static_cast<std::size_t>(q * latencies_ms.size()))];
  };
  std::printf("{\"requests\":%zu,\"concurrency\":%d,\"seconds\":%.3f,\"throughput_rps\":%.2f,\"p50_ms\":%.2f,"
              "\"p99_ms\":%.2f,\"failed\":%d,\"status_503\":%d}\n",
              latencies_ms.size(), concurrency, seconds, latencies_ms.size() / seconds, at(0.5), at(0.99), failed.load(),
              busy.load());
  return 0;
}
