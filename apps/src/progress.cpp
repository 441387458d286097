#include "troupe/apps/progress.hpp"

#include <unistd.h>

#include <cmath>

namespace troupe::apps {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

Progress::Progress(std::int64_t total, std::string unit, std::int64_t log_every, std::FILE* out)
    : total_(total), log_every_(log_every > 0 ? log_every : 1), unit_(std::move(unit)), out_(out),
      tty_(isatty(fileno(out)) != 0) {}

void Progress::step(std::int64_t step, double loss, double items, double seconds) {
  if (first_step_ < 0) first_step_ = step;
  items_ += items;
  seconds_ += seconds;
  const double rate = seconds_ > 0 ? items_ / seconds_ : 0;
  const double per_step = seconds_ / static_cast<double>(step - first_step_ + 1);
  const double eta = per_step * static_cast<double>(total_ - step);
  if (tty_) {
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r\033[K[%s] step %lld/%lld  loss %.4f  %.0f %s  ETA %s", bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), loss, rate, unit_.c_str(), format_duration(eta).c_str());
    drawn_ = true;
  } else if (step % log_every_ == 0 || step == total_ || step == first_step_) {
    std::fprintf(out_, "step %lld/%lld loss %.4f %.0f %s eta %s\n", static_cast<long long>(step),
                 static_cast<long long>(total_), loss, rate, unit_.c_str(), format_duration(eta).c_str());
  }
  std::fflush(out_);
}

void Progress::line(const std::string& text) {
  if (tty_ && drawn_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s\n", text.c_str());
  drawn_ = false;
  std::fflush(out_);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fprintf(out_, "\n");
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace troupe::apps
