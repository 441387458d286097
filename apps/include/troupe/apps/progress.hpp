#pragma once
// Training progress for people: on a terminal a bar redrawn in place (step, loss, throughput, ETA),
// otherwise plain log lines every few steps, so logs stay readable when piped to a file.

#include <cstdint>
#include <cstdio>
#include <string>

namespace troupe::apps {

/// Reports the progress of `total` steps on `out` (stdout by default).
class Progress {
 public:
  /// `unit` names the throughput ("tok/s", "img/s"); `log_every` is the plain-line cadence.
  Progress(std::int64_t total, std::string unit, std::int64_t log_every, std::FILE* out = stdout);
  /// Ends a bar left drawn (a run stopped by an error), so the error starts on a line of its own.
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// Step `step` (1-based, counting from the first step of the run) finished with `loss`,
  /// processing `items` units in `seconds`.
  void step(std::int64_t step, double loss, double items, double seconds);
  /// Prints a whole line (validation results, checkpoints) without breaking the bar.
  void line(const std::string& text);
  /// Ends the bar (a newline on a terminal).
  void finish();
  /// True when the output is a terminal.
  bool interactive() const { return tty_; }

 private:
  std::int64_t total_, log_every_, first_step_ = -1;
  std::string unit_;
  std::FILE* out_;
  bool tty_, drawn_ = false;
  double items_ = 0, seconds_ = 0;
};

/// "1h02m", "3m07s", "12s".
std::string format_duration(double seconds);

}  // namespace troupe::apps
