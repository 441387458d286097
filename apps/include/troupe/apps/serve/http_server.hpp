#pragma once
// The HTTP/1.1 server of troupe-serve, on Boost.Beast: it reads each request under a body limit and
// a timeout, checks the bearer token, hands the request to a handler that answers when it likes
// (from any thread: inference runs elsewhere), whole or in parts (a chunked stream, which tells the
// handler when the client has gone), and writes the answer; connections stay open between
// requests (keep-alive), but for a stream's. Malformed requests get 400, oversized bodies 413, a wrong or
// missing token 401, and a client too slow to send its request is disconnected. stop() stops
// accepting and returns once every request already read has been answered.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace troupe::apps::serve {

/// A request as handlers see it.
struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the path, without the query
  std::string query;   // after '?', or empty
  std::string content_type;
  std::string body;
};

/// What a handler answers.
struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones (Retry-After, ...)
};

/// A JSON error answer: {"error": message} with `status`.
Response json_error(int status, const std::string& message);

/// An answer sent in parts as they come (chunked transfer encoding: Server-Sent Events), from any
/// thread. The connection closes after it ends.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  /// Queues one part for the client; false once the client has gone, so the producer can stop.
  virtual bool send(std::string part) = 0;
  /// Ends the answer; parts sent afterwards are dropped. Idempotent.
  virtual void end() = 0;
  /// True once the client has gone (a write to it failed).
  virtual bool cancelled() const = 0;
};

/// Answers one request, once, from any thread: whole, or in parts (stream()). Copies share the once.
class Reply {
 public:
  /// The server's side: what answering does.
  struct Sink {
    virtual ~Sink() = default;
    virtual void whole(Response r) = 0;
    virtual std::shared_ptr<ResponseStream> parts(int status, const std::string& content_type,
                                                  std::vector<std::pair<std::string, std::string>> headers) = 0;
    /// Whether the client closed the connection before the answer; thread-safe.
    virtual bool gone() const = 0;
  };
  Reply() = default;
  explicit Reply(std::shared_ptr<Sink> sink);
  /// Answers with `r`; does nothing once the request is answered (or streaming).
  void operator()(Response r) const;
  /// Starts answering in parts: the status line and headers go out now; null once answered.
  std::shared_ptr<ResponseStream> stream(int status, const std::string& content_type,
                                         std::vector<std::pair<std::string, std::string>> headers = {}) const;
  /// Whether the client has closed the connection while its request waited for the answer: a
  /// handler still working on it may give it up (the answer would go nowhere).
  bool gone() const;

 private:
  // Takes the sink, once: the first call of either kind gets it.
  std::shared_ptr<Sink> take() const;
  struct Once;
  std::shared_ptr<Once> once_;
};
/// Handles one request (after the token check); may answer at once or later.
using Handler = std::function<void(const Request&, Reply)>;
/// Called once per answered request with its route, status and seconds from read to written.
using Observer = std::function<void(const Request&, int status, double seconds)>;

/// Server settings.
struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;                      // 0: a free port (see HttpServer::port())
  std::uint64_t max_body_bytes = 16u << 20;       // larger bodies get 413
  std::chrono::milliseconds read_timeout{10000};  // to receive a whole request
  int io_threads = 1;                             // threads reading and writing sockets
  std::string token;                              // non-empty: requests need "Authorization: Bearer <token>"
  std::string server_name = "troupe-serve";
};

/// The server: listening from construction, serving on its own threads until stop().
class HttpServer {
 public:
  /// Binds host:port (throws troupe::Error(io) naming them when it cannot) and starts serving.
  HttpServer(ServerOptions options, Handler handler, Observer observer = nullptr);
  /// stop().
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// The port it listens on.
  std::uint16_t port() const;
  /// Stops accepting connections, waits until every request already read has been answered and
  /// written, then closes the connections and joins the threads. Idempotent.
  void stop();
  /// Requests read and not yet answered.
  int in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// True when `a` equals `b`, comparing every byte whatever the first difference (tokens).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace troupe::apps::serve
