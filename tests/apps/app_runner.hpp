#pragma once
// Runs an application binary as a user would (through the shell, stdout and stderr together) and
// reads what it printed, for the smoke tests of troupe-gpt and troupe-sr.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace troupe::test {

/// What one run of a command produced.
struct AppRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  /// The last line that parses as a JSON object (the apps' final summary line); null if none.
  nlohmann::json last_json() const;
  /// The lines of the output.
  std::vector<std::string> lines() const;
};

/// Runs `command` with /bin/sh and waits for it.
AppRun run_app(const std::string& command);

/// A command a user might mistype and the words its one error line must contain.
struct BadInput {
  std::string command, expect;
};

/// Runs each command: it must exit non-zero with `expect` in its stderr, which is one line, never
/// crashing.
void expect_clear_failures(const std::vector<BadInput>& cases);

/// A fresh empty folder under the test temp dir, named after `tag`.
std::string fresh_dir(const std::string& tag);

/// Column `column` of a CSV file written by --metrics (header skipped), as numbers.
std::vector<double> csv_column(const std::string& path, const std::string& column);

}  // namespace troupe::test
