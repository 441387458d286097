// troupe-serve's HTTP layer, on loopback: answers from any thread, keep-alive, the body limit
// (413), malformed requests (400), the bearer token (401), a slow client timed out, a truncated
// body, stop() answering what is in flight; the batching queue and the Prometheus metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "troupe/apps/serve/http_client.hpp"
#include "troupe/apps/serve/batch_queue.hpp"
#include "troupe/apps/serve/http_server.hpp"
#include "troupe/apps/serve/metrics.hpp"

using namespace troupe::apps::serve;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A handler that echoes the method, path and body; /later answers from another thread after
// `delay_ms` from the query.
Handler echo() {
  return [](const Request& r, Reply reply) {
    if (r.target == "/later") {
      const int ms = r.query.empty() ? 0 : std::stoi(r.query);
      std::thread([reply, ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        reply(Response{200, "text/plain", "late", {}});
      }).detach();
      return;
    }
    reply(Response{200, "text/plain", r.method + " " + r.target + " " + r.body, {}});
  };
}

using Client = HttpClient;

ServerOptions loopback() {
  ServerOptions o;
  o.port = 0;
  o.max_body_bytes = 1024;
  o.read_timeout = std::chrono::milliseconds(300);
  o.io_threads = 2;
  return o;
}

}  // namespace

TEST(ServeHttp, AnswersFromAnyThreadAndKeepsConnectionsAlive) {
  HttpServer server(loopback(), echo());
  Client c(server.port());
  auto a = c.send(http::verb::post, "/x?y=1", "hello");
  EXPECT_EQ(a.result_int(), 200);
  EXPECT_EQ(a.body(), "POST /x hello");
  EXPECT_NE(std::string(a[http::field::server]).find("troupe-serve/"), std::string::npos);
  auto b = c.send(http::verb::get, "/later?50");  // the same connection, answered from another thread
  EXPECT_EQ(b.result_int(), 200);
  EXPECT_EQ(b.body(), "late");
}

TEST(ServeHttp, OversizedAndMalformedRequestsGetAClearError) {
  HttpServer server(loopback(), echo());
  Client big(server.port());
  const std::string huge = big.raw("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n");
  EXPECT_NE(huge.find("413"), std::string::npos) << huge;
  EXPECT_NE(huge.find("larger than the limit of 1024 bytes"), std::string::npos) << huge;
  Client bad(server.port());
  const std::string garbage = bad.raw("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_NE(garbage.find("400"), std::string::npos) << garbage;
  EXPECT_NE(garbage.find("malformed request"), std::string::npos) << garbage;
  // A body cut short by the client: the server lets go of it and goes on serving.
  {
    Client cut(server.port());
    asio::write(cut.socket, asio::buffer(std::string("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nshort")));
  }
  EXPECT_EQ(Client(server.port()).send(http::verb::get, "/ok").result_int(), 200);
}

TEST(ServeHttp, ASlowClientIsDisconnected) {
  HttpServer server(loopback(), echo());
  Client slow(server.port());
  asio::write(slow.socket, asio::buffer(std::string("GET /x HTTP/1.1\r\nHo")));  // and then nothing
  const auto t0 = std::chrono::steady_clock::now();
  char byte;
  beast::error_code ec;
  slow.socket.read_some(asio::buffer(&byte, 1), ec);  // returns when the server closes
  EXPECT_TRUE(ec) << "the server answered a half request";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(ServeHttp, TheBearerTokenIsChecked) {
  ServerOptions o = loopback();
  o.token = "s3cret";
  HttpServer server(o, echo());
  Client c(server.port());
  const auto none = c.send(http::verb::get, "/x");
  EXPECT_EQ(none.result_int(), 401);
  EXPECT_NE(none.body().find("bearer token"), std::string::npos);
  EXPECT_EQ(c.send(http::verb::get, "/x", "", "s3creT").result_int(), 401);
  EXPECT_EQ(c.send(http::verb::get, "/x", "", "s3cret").result_int(), 200);
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(ServeHttp, StopAnswersWhatIsInFlight) {
  auto server = std::make_unique<HttpServer>(loopback(), echo());
  const std::uint16_t port = server->port();
  auto answer = std::async(std::launch::async, [port] { return Client(port).send(http::verb::get, "/later?300"); });
  while (server->in_flight() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server->stop();  // waits for the late answer
  const auto r = answer.get();
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "late");
  EXPECT_THROW(Client{port}, boost::system::system_error);  // no longer listening
}

TEST(ServeBatchQueue, BatchesUpToTheLimitAndRefusesWhenFull) {
  std::mutex m;
  std::vector<std::vector<int>> batches;
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  {
    BatchQueue<int> q(4, 3, std::chrono::milliseconds(200), 1, [&](std::vector<int>& batch, BatchQueue<int>&) {
      go.wait();
      std::lock_guard<std::mutex> lock(m);
      batches.push_back(batch);
    });
    // Three jobs arrive together: one batch. While it runs (blocked), four more fill the queue and
    // a fifth is refused.
    for (int i = 0; i < 3; ++i) {
      int job = i;
      ASSERT_TRUE(q.try_push(job));
    }
    while (q.depth() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 3; i < 7; ++i) {
      int job = i;
      ASSERT_TRUE(q.try_push(job));
    }
    int extra = 7;
    EXPECT_FALSE(q.try_push(extra));
    EXPECT_EQ(extra, 7);
    EXPECT_EQ(q.depth(), 4u);
    release.set_value();
  }  // destruction runs what was queued
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(batches[1], (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(batches[2], (std::vector<int>{6}));
}

// Continuous batching: a batch that runs in steps takes the jobs that came while it ran, up to its
// room; the rest wait for the next batch.
TEST(ServeBatchQueue, ARunningBatchTakesTheJobsThatCameMeanwhile) {
  std::vector<std::vector<int>> batches;
  std::promise<void> started, release;
  std::shared_future<void> go = release.get_future().share();
  {
    BatchQueue<int> q(8, 3, std::chrono::milliseconds(0), 1, [&](std::vector<int>& batch, BatchQueue<int>& self) {
      if (batches.empty()) {
        started.set_value();
        go.wait();
        for (int job : self.take_waiting(self.max_batch() - batch.size())) batch.push_back(job);
      }
      batches.push_back(batch);
    });
    int first = 0;
    ASSERT_TRUE(q.try_push(first));
    started.get_future().wait();
    for (int i = 1; i < 4; ++i) {
      int job = i;
      ASSERT_TRUE(q.try_push(job));
    }
    EXPECT_TRUE(q.take_waiting(0).empty());
    release.set_value();
  }
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(batches[1], (std::vector<int>{3}));
}

TEST(ServeMetrics, RendersPrometheusText) {
  Metrics m;
  m.observe_request("/v1/upscale", 200, 0.003);
  m.observe_request("/v1/upscale", 200, 0.2);
  m.observe_request("/v1/upscale", 503, 0.0001);
  m.observe_batch("/v1/upscale", 3);
  m.set_queue_depth(5);
  EXPECT_EQ(m.requests_with_status(200), 2u);
  const std::string text = m.prometheus();
  for (const char* line : {"troupe_requests_total{route=\"/v1/upscale\",status=\"200\"} 2",
                           "troupe_requests_total{route=\"/v1/upscale\",status=\"503\"} 1",
                           "troupe_request_duration_seconds_bucket{route=\"/v1/upscale\",le=\"0.005\"} 2",
                           "troupe_request_duration_seconds_bucket{route=\"/v1/upscale\",le=\"+Inf\"} 3",
                           "troupe_request_duration_seconds_count{route=\"/v1/upscale\"} 3",
                           "troupe_batch_size_bucket{route=\"/v1/upscale\",le=\"2\"} 0",
                           "troupe_batch_size_bucket{route=\"/v1/upscale\",le=\"4\"} 1", "troupe_queue_depth 5",
                           "# TYPE troupe_request_duration_seconds histogram"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}
