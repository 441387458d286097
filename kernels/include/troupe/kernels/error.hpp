#pragma once
// Troupe's error type: every failure a user can cause surfaces as a troupe::Error whose message
// says what was wrong, where (op, tensor, shape) and, where possible, what to do about it.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace troupe {

/// What category of mistake an Error reports; lets callers react without parsing messages.
enum class ErrorKind {
  invalid_argument,  // a parameter value that makes no sense (negative size, bad axis, ...)
  shape_mismatch,    // shapes that do not fit the op
  dtype_mismatch,    // an element type the op does not accept here
  device_mismatch,   // tensors on different devices, or on a device the op cannot use
  out_of_range,      // an index outside its valid range (embedding ids, class targets, ...)
  missing_kernel,    // no kernel registered for (op, device, dtype)
  unsupported,       // a feature this build does not have (e.g. CUDA without a toolkit)
  io,                // files and streams
  runtime,           // anything else that failed while running
};

/// Name of an ErrorKind, as it appears at the start of an error message.
const char* to_string(ErrorKind kind);

/// The exception every Troupe layer throws for user-visible failures.
class Error : public std::runtime_error {
 public:
  /// Builds an error of `kind`; the message is prefixed with the kind's name.
  Error(ErrorKind kind, const std::string& message);
  /// The category of the failure.
  ErrorKind kind() const noexcept { return kind_; }
  /// The message without the kind's name, for callers that rethrow it with more context.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

/// Text read from a file, made safe to quote in an error: control bytes, quotes, backslashes and
/// non-ASCII bytes become \xNN, and more than `limit` characters end in "...", so a hostile name
/// can neither break the message's one line nor send escape codes to the terminal.
std::string printable(const std::string& text, std::size_t limit = 80);

namespace detail {
/// Streams every argument into one string; keeps the throw sites short.
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/// Throws a troupe::Error of `kind` whose message is the concatenation of `args`.
template <class... Args>
[[noreturn]] void fail(ErrorKind kind, Args&&... args) {
  throw Error(kind, detail::str_cat(std::forward<Args>(args)...));
}

}  // namespace troupe

/// Throws troupe::Error(kind, message parts...) when `cond` is false.
#define TROUPE_CHECK(cond, kind, ...)                   \
  do {                                                  \
    if (!(cond)) ::troupe::fail(::troupe::ErrorKind::kind, __VA_ARGS__); \
  } while (0)
