#include "troupe/apps/cli.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "troupe/kernels/error.hpp"
#include "troupe/version.hpp"

namespace troupe::apps {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

CLI::Validator range_check(double lo, double hi, bool open, const std::string& note) {
  const std::string span = open ? "between " + number(lo) + " and " + number(hi) + " (both excluded)"
                                : "from " + number(lo) + " to " + number(hi);
  const std::string expect = "must be " + span + (note.empty() ? "" : " (" + note + ")");
  auto check = [=](std::string& text) -> std::string {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0') return "";  // not a number: the conversion reports it
    const bool inside = open ? v > lo && v < hi : v >= lo && v <= hi;  // NaN is never inside
    return inside ? "" : expect + ", got " + text;
  };
  return CLI::Validator(check, open ? "(" + number(lo) + ", " + number(hi) + ")" : "[" + number(lo) + ", " + number(hi) + "]");
}

}  // namespace

CLI::Validator in_range(double lo, double hi, const std::string& note) { return range_check(lo, hi, false, note); }

CLI::Validator open_range(double lo, double hi, const std::string& note) { return range_check(lo, hi, true, note); }

int run_guarded(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory; use smaller sizes (--batch, model or patch flags)\n", name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
  }
  return 1;
}

int run_cli(CLI::App& app, int argc, char** argv, const char* name, const std::function<int()>& body) {
  app.failure_message([name](const CLI::App*, const CLI::Error& e) {
    return std::string(name) + ": " + e.what() + " (see --help)\n";
  });
  app.set_version_flag("--version", std::string(name) + " " + TROUPE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run_guarded(name, body);
}

}  // namespace troupe::apps
