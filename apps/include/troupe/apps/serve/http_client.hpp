#pragma once
// A blocking HTTP/1.1 client of troupe-serve, on Beast: one keep-alive connection, requests in
// turn, and raw bytes for the malformed cases (the tests and the load generator use it).
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>

namespace troupe::apps::serve {

/// One connection to 127.0.0.1:`port`.
struct HttpClient {
  explicit HttpClient(std::uint16_t port) : socket(io) {
    socket.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  }
  /// Sends one request and reads its answer.
  boost::beast::http::response<boost::beast::http::string_body> send(boost::beast::http::verb verb, const std::string& target,
                                                                     const std::string& body = "",
                                                                     const std::string& token = "") {
    namespace http = boost::beast::http;
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    http::response<http::string_body> res;
    http::read(socket, buffer, res);
    return res;
  }
  /// Writes `bytes` and returns everything the server sends until it closes.
  std::string raw(const std::string& bytes) {
    boost::asio::write(socket, boost::asio::buffer(bytes));
    std::string out;
    boost::beast::error_code ec;
    char chunk[4096];
    for (std::size_t n; (n = socket.read_some(boost::asio::buffer(chunk), ec)) > 0 && !ec;) out.append(chunk, n);
    return out;
  }
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket;
  boost::beast::flat_buffer buffer;
};

}  // namespace troupe::apps::serve
