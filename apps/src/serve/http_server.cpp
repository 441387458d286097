// troupe-serve's HTTP/1.1 server: Beast's asynchronous reads and writes on a few io threads, one
// strand per connection; handlers answer through a Reply that posts the write back to the
// connection's strand, whole or as chunks of a stream.
#include "troupe/apps/serve/http_server.hpp"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "troupe/kernels/error.hpp"
#include "troupe/version.hpp"

namespace troupe::apps::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Response json_error(int status, const std::string& message) {
  // The message may quote the bad input, which need not be UTF-8: replaced, the answer stays JSON.
  const nlohmann::json body{{"error", message}};
  return Response{status, "application/json", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", {}};
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

struct HttpServer::Impl {
  Impl(ServerOptions o, Handler h, Observer obs)
      : options(std::move(o)), handler(std::move(h)), observer(std::move(obs)), acceptor(asio::make_strand(io)) {}

  ServerOptions options;
  Handler handler;
  Observer observer;
  asio::io_context io;
  // Keeps the io threads running while no socket operation is pending: a request handed to a
  // handler waits for its reply with nothing posted.
  asio::executor_work_guard<asio::io_context::executor_type> work{asio::make_work_guard(io)};
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable answered;
  int in_flight = 0;  // guarded by mutex
  int posting = 0;    // replies inside their post to `io` from a handler's thread; guarded by mutex

  void accept();
  void begin_request() {
    std::lock_guard<std::mutex> lock(mutex);
    ++in_flight;
  }
  void end_request() {
    std::lock_guard<std::mutex> lock(mutex);
    --in_flight;
    answered.notify_all();
  }
  // Posts `f` to `executor` (a connection's strand: posts from one thread run in order) from a
  // handler's thread: stop() waits until the post has returned too, not only for the answer it
  // carries (which may be written before the post returns).
  template <class Executor, class F>
  void post_from_handler(const Executor& executor, F&& f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++posting;
    }
    asio::post(executor, std::forward<F>(f));
    std::lock_guard<std::mutex> lock(mutex);
    --posting;
    answered.notify_all();
  }
};

struct Reply::Once {
  std::mutex mutex;
  std::shared_ptr<Sink> sink;
  std::shared_ptr<Sink> asked;  // the same sink, kept for gone() after answering started
};

Reply::Reply(std::shared_ptr<Sink> sink) : once_(std::make_shared<Once>()) {
  once_->asked = sink;
  once_->sink = std::move(sink);
}

bool Reply::gone() const { return once_ && once_->asked && once_->asked->gone(); }

std::shared_ptr<Reply::Sink> Reply::take() const {
  if (!once_) return nullptr;
  std::lock_guard<std::mutex> lock(once_->mutex);
  return std::move(once_->sink);
}

void Reply::operator()(Response r) const {
  if (std::shared_ptr<Sink> sink = take()) sink->whole(std::move(r));
}

std::shared_ptr<ResponseStream> Reply::stream(int status, const std::string& content_type,
                                              std::vector<std::pair<std::string, std::string>> headers) const {
  std::shared_ptr<Sink> sink = take();
  return sink ? sink->parts(status, content_type, std::move(headers)) : nullptr;
}

namespace {

// One connection: read a request, hand it on, write the answer (whole, or chunk by chunk), and
// again while keep-alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* server) : stream_(std::move(socket)), server_(server) {}

  void start() { asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); }); }

  // Runs `f` on this connection's strand, from a handler's thread, after what it posted before.
  template <class F>
  void on_strand(F&& f) {
    server_->post_from_handler(stream_.get_executor(), std::forward<F>(f));
  }
  void whole(Response r) {
    on_strand([self = shared_from_this(), r = std::move(r)]() mutable { self->answer(std::move(r), self->keep_alive_); });
  }
  // A stream's parts, on the strand: the head first, then each part as a chunk, then the last chunk.
  void open_stream(int status, std::string content_type, std::vector<std::pair<std::string, std::string>> headers) {
    answering_ = true;
    stream_status_ = status;
    head_.emplace(static_cast<http::status>(status), 11);
    head_->set(http::field::server, server_->options.server_name + "/" + TROUPE_VERSION);
    head_->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) head_->set(name, value);
    head_->keep_alive(false);
    head_->chunked(true);
    serializer_.emplace(*head_);
    writing_ = true;
    stream_.expires_after(server_->options.read_timeout);
    http::async_write_header(stream_, *serializer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) self->gone_->store(true);
      self->pump();
    });
  }
  void push_part(std::string part) {
    if (!gone_->load()) parts_.push_back(std::move(part));
    pump();
  }
  void end_stream() {
    ending_ = true;
    pump();
  }
  std::shared_ptr<std::atomic<bool>> gone() const { return gone_; }

 private:
  void pump() {
    if (writing_ || finished_) return;
    if (gone_->load()) parts_.clear();
    if (!parts_.empty()) {
      auto part = std::make_shared<std::string>(std::move(parts_.front()));
      parts_.pop_front();
      writing_ = true;
      stream_.expires_after(server_->options.read_timeout);
      asio::async_write(stream_, http::make_chunk(asio::buffer(*part)),
                        [self = shared_from_this(), part](beast::error_code ec, std::size_t) {
                          self->writing_ = false;
                          if (ec) self->gone_->store(true);
                          self->pump();
                        });
      return;
    }
    if (!ending_) return;
    finished_ = true;
    if (gone_->load()) return written(asio::error::connection_reset, stream_status_, false);
    stream_.expires_after(server_->options.read_timeout);
    asio::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->written(ec, self->stream_status_, false);
    });
  }

  void read() {
    if (server_->stopping) return close();
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    stream_.expires_after(server_->options.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    answering_ = false;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof)
      return close();
    request_ = Request{};
    started_ = std::chrono::steady_clock::now();
    if (parser_->is_header_done()) {
      const auto& header = parser_->get();
      request_.method = std::string(header.method_string());
      const std::string target(header.target());
      const std::size_t q = target.find('?');
      request_.target = target.substr(0, q);
      request_.query = q == std::string::npos ? "" : target.substr(q + 1);
      request_.content_type = std::string(header[http::field::content_type]);
    }
    server_->begin_request();
    if (ec == http::error::body_limit)
      return answer(json_error(413, "the request body is larger than the limit of " +
                                        std::to_string(server_->options.max_body_bytes) + " bytes"),
                    false);
    if (ec) return answer(json_error(400, "malformed request: " + ec.message()), false);
    http::request<http::string_body> message = parser_->release();
    keep_alive_ = message.keep_alive();
    request_.body = std::move(message.body());
    if (!server_->options.token.empty()) {
      const std::string given(message[http::field::authorization]);
      if (!constant_time_equal(given, "Bearer " + server_->options.token)) {
        Response r = json_error(401, "missing or wrong bearer token; send 'Authorization: Bearer <token>'");
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        return answer(std::move(r), keep_alive_);
      }
    }
    // The reply keeps the session alive until it answers, then lets go: a handler may keep copies of
    // it (on threads of its own) after the server is gone, and their end must not touch the session.
    // Answers are posted to the io_context, and from there onto the connection's strand: a handler's
    // thread holds no strand handle, and the server's stop() waits for the post to return (ASan and
    // TSan caught both outliving the server).
    const Reply reply(std::make_shared<SessionSink>(shared_from_this()));
    try {
      server_->handler(request_, reply);
    } catch (const std::exception& e) {
      reply(json_error(500, std::string("internal error: ") + e.what()));
    }
    watch(++requests_);
  }

  // While request `request` waits for its answer, notices a client that closes the connection:
  // the socket turns readable with nothing to read. Bytes to read are a pipelined request, read
  // after this answer; an answer already being written ends the watch.
  void watch(std::uint64_t request) {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), request](beast::error_code ec) {
      if (ec || request != self->requests_ || self->answering_) return;
      beast::error_code error;
      if (self->stream_.socket().available(error) == 0 || error) self->gone_->store(true);
    });
  }

  // Writes `r`; afterwards reads the next request when `keep_alive`, else closes.
  void answer(Response r, bool keep_alive) {
    answering_ = true;
    auto message = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
    message->set(http::field::server, server_->options.server_name + "/" + TROUPE_VERSION);
    message->set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) message->set(name, value);
    message->body() = std::move(r.body);
    message->keep_alive(keep_alive && !server_->stopping);
    message->prepare_payload();
    const int status = r.status;
    stream_.expires_after(server_->options.read_timeout);
    http::async_write(stream_, *message,
                      [self = shared_from_this(), message, status](beast::error_code ec, std::size_t) {
                        self->written(ec, status, message->keep_alive());
                      });
  }

  void written(beast::error_code ec, int status, bool keep_alive) {
    if (server_->observer)
      server_->observer(request_, status,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    server_->end_request();
    if (ec || !keep_alive) return close();
    read();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  // The answer a handler gives a request of this session: whole, or opened as a stream.
  class SessionSink : public Reply::Sink {
   public:
    explicit SessionSink(std::shared_ptr<Session> session) : session_(std::move(session)), gone_(session_->gone()) {}
    void whole(Response r) override { std::exchange(session_, nullptr)->whole(std::move(r)); }
    std::shared_ptr<ResponseStream> parts(int status, const std::string& content_type,
                                          std::vector<std::pair<std::string, std::string>> headers) override;
    bool gone() const override { return gone_->load(); }

   private:
    std::shared_ptr<Session> session_;
    std::shared_ptr<std::atomic<bool>> gone_;
  };

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* server_;  // outlives every session: its threads are joined, and its io_context
                              // destroys the sessions still waiting
  Request request_;
  bool keep_alive_ = false;
  std::uint64_t requests_ = 0;  // requests read; the watch of an earlier one ends
  bool answering_ = false;      // the answer to the last request is being written
  std::chrono::steady_clock::time_point started_;
  // A streamed answer (strand only, but `gone_`, which the producer's thread reads).
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> parts_;
  bool writing_ = false, ending_ = false, finished_ = false;
  int stream_status_ = 200;
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
};

// A stream's producer side: parts and the end go to the session's strand; an unended stream ends
// when its last holder lets go, so the request never stays in flight.
class SessionStream : public ResponseStream {
 public:
  explicit SessionStream(std::shared_ptr<Session> session) : session_(std::move(session)), gone_(session_->gone()) {}
  ~SessionStream() override { end(); }
  bool send(std::string part) override {
    if (ended_.load() || gone_->load()) return false;
    session_->on_strand([s = session_, part = std::move(part)]() mutable { s->push_part(std::move(part)); });
    return !gone_->load();
  }
  void end() override {
    if (ended_.exchange(true)) return;
    session_->on_strand([s = session_] { s->end_stream(); });
  }
  bool cancelled() const override { return gone_->load(); }

 private:
  std::shared_ptr<Session> session_;
  std::shared_ptr<std::atomic<bool>> gone_;
  std::atomic<bool> ended_{false};
};

std::shared_ptr<ResponseStream> Session::SessionSink::parts(int status, const std::string& content_type,
                                                            std::vector<std::pair<std::string, std::string>> headers) {
  std::shared_ptr<Session> session = std::exchange(session_, nullptr);
  session->on_strand([session, status, content_type, headers = std::move(headers)]() mutable {
    session->open_stream(status, content_type, std::move(headers));
  });
  return std::make_shared<SessionStream>(std::move(session));
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (!ec) std::make_shared<Session>(std::move(socket), this)->start();
    accept();
  });
}

HttpServer::HttpServer(ServerOptions options, Handler handler, Observer observer)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), std::move(observer))) {
  Impl& s = *impl_;
  TROUPE_CHECK(s.options.io_threads >= 1, invalid_argument, "serve: io threads must be >= 1, got ", s.options.io_threads);
  beast::error_code ec;
  const auto address = asio::ip::make_address(s.options.host, ec);
  TROUPE_CHECK(!ec, invalid_argument, "serve: '", s.options.host, "' is not an IP address (", ec.message(),
               "); use e.g. 127.0.0.1 or 0.0.0.0");
  const tcp::endpoint endpoint(address, s.options.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  TROUPE_CHECK(!ec, io, "serve: cannot listen on ", s.options.host, ":", s.options.port, ": ", ec.message(),
               "; pick another --port or stop what holds it");
  s.accept();
  for (int i = 0; i < s.options.io_threads; ++i) s.threads.emplace_back([&s] { s.io.run(); });
}

HttpServer::~HttpServer() { stop(); }

std::uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->in_flight;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) {
    for (std::thread& t : s.threads)
      if (t.joinable()) t.join();
    return;
  }
  asio::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
  });
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.answered.wait(lock, [&s] { return s.in_flight == 0 && s.posting == 0; });
  }
  s.work.reset();
  s.io.stop();
  for (std::thread& t : s.threads)
    if (t.joinable()) t.join();
}

}  // namespace troupe::apps::serve
