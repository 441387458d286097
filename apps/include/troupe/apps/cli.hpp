#pragma once
// What every Troupe program shares at its top level: flag parsing whose errors are one line, a
// guard that turns any exception (out of memory included) into one line and exit code 1, and the
// ranges numeric flags accept, reported in the user's terms.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace troupe::apps {

/// Runs `body` and returns its exit code; a troupe::Error, std::bad_alloc or other std::exception
/// becomes one line "<name>: <message>" on stderr and exit code 1.
int run_guarded(const char* name, const std::function<int()>& body);

/// Parses `argv` into `app` (a flag error is one line "<name>: <message> (see --help)", with
/// CLI11's exit code), then runs `body` under run_guarded.
int run_cli(CLI::App& app, int argc, char** argv, const char* name, const std::function<int()>& body);

/// A check for a numeric flag: the value must be a number from `lo` to `hi` (both included);
/// `note` (e.g. "0 = a free port") is added to the message.
CLI::Validator in_range(double lo, double hi, const std::string& note = "");

/// As in_range, with both ends excluded (learning rates, fractions).
CLI::Validator open_range(double lo, double hi, const std::string& note = "");

}  // namespace troupe::apps
