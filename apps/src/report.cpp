#include "troupe/apps/report.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "report_page.hpp"
#include "troupe/actors/trace_summary.hpp"
#include "troupe/apps/metrics_reader.hpp"
#include "troupe/models/weights.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/version.hpp"

namespace troupe::apps {

namespace fs = std::filesystem;

namespace {

// A GPT step has hundreds of actors, more timeline rows than anyone reads.
constexpr std::size_t kTimelineRows = 40;

// The metrics file of a run folder: metrics.csv, metrics.jsonl or metrics.json, else its only .csv
// or .jsonl file (a trace is .json too, so other .json files are not guessed at).
std::string metrics_in(const fs::path& dir) {
  for (const char* name : {"metrics.csv", "metrics.jsonl", "metrics.json"})
    if (fs::is_regular_file(dir / name)) return (dir / name).string();
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file(ec) && (ext == ".csv" || ext == ".jsonl")) found.push_back(e.path().string());
  }
  TROUPE_CHECK(!ec, io, "cannot list the folder '", dir.string(), "' (", ec.message(), ")");
  TROUPE_CHECK(!found.empty(), io, "the folder '", dir.string(), "' holds no metrics file (metrics.csv, metrics.jsonl or ",
               "metrics.json, or one .csv or .jsonl file); give the file a run wrote with --metrics");
  std::sort(found.begin(), found.end());
  std::string listed;
  for (const std::string& f : found) listed += (listed.empty() ? "" : ", ") + fs::path(f).filename().string();
  TROUPE_CHECK(found.size() == 1, io, "the folder '", dir.string(), "' holds several metrics files (", listed,
               "); give the one to draw");
  return found[0];
}

// A folder's own name, also when `dir` is "." or ends in a slash.
std::string folder_name(const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Each shown actor with its handler runs, in the order of its first run: those on a critical path
// first, then the busiest, up to kTimelineRows.
nlohmann::json timeline_rows(const actors::TraceSummary& t) {
  std::map<std::string, const actors::ActorSummary*> by_name;
  for (const actors::ActorSummary& a : t.actors) by_name.emplace(a.name, &a);
  std::vector<const actors::ActorSummary*> rows;
  std::set<std::string> taken;
  auto take = [&](const std::string& name) {
    const auto a = by_name.find(name);
    if (rows.size() < kTimelineRows && a != by_name.end() && taken.insert(name).second) rows.push_back(a->second);
  };
  for (const actors::StepSummary& s : t.steps)
    for (const std::string& name : s.critical_path) take(name);
  for (const actors::ActorSummary& a : t.actors) take(a.name);  // busiest first
  auto first_run = [](const actors::ActorSummary* a) { return a->runs.empty() ? 0.0 : a->runs.front().start_us; };
  std::stable_sort(rows.begin(), rows.end(), [&](auto* x, auto* y) { return first_run(x) < first_run(y); });
  nlohmann::json out = nlohmann::json::array();
  for (const actors::ActorSummary* a : rows) {
    nlohmann::json runs = nlohmann::json::array();
    for (const actors::HandlerRun& r : a->runs) runs.push_back({r.start_us, r.us});
    out.push_back({{"name", a->name}, {"busy_us", a->busy_us}, {"compute_us", a->compute_us}, {"runs", runs}});
  }
  return out;
}

// What the page draws of a trace: the timeline's rows and each step's critical path.
nlohmann::json trace_data(const actors::TraceSummary& t) {
  nlohmann::json steps = nlohmann::json::array();
  for (const actors::StepSummary& s : t.steps) {
    nlohmann::json path = nlohmann::json::array();
    for (std::size_t i = 0; i < s.critical_path.size(); ++i)
      path.push_back({{"actor", s.critical_path[i]}, {"start_us", s.critical_runs[i].start_us}, {"us", s.critical_runs[i].us}});
    steps.push_back({{"step", s.step}, {"wall_us", s.wall_us}, {"critical_path_us", s.critical_path_us}, {"path", path}});
  }
  return {{"span_us", t.span_us}, {"actors", t.actors.size()}, {"rows", timeline_rows(t)}, {"steps", steps}};
}

// The metrics as columns; NaN (no value at a step) becomes null.
nlohmann::json metrics_data(const MetricsSeries& m) {
  nlohmann::json columns = nlohmann::json::object();
  for (const std::string& name : m.names) columns[name] = m.columns.at(name);
  return {{"steps", m.steps}, {"names", m.names}, {"columns", columns}};
}

}  // namespace

ReportSources find_report_sources(const std::string& path, const std::string& trace) {
  std::error_code ec;
  TROUPE_CHECK(fs::exists(path, ec), io, "'", path, "' does not exist; give a metrics file written by --metrics, or ",
               "the folder that holds it");
  ReportSources s;
  s.trace = trace;
  if (fs::is_directory(path, ec)) {
    s.metrics = metrics_in(path);
    s.name = folder_name(path);
    if (trace.empty() && fs::is_regular_file(fs::path(path) / "trace.json", ec)) s.trace = (fs::path(path) / "trace.json").string();
    return s;
  }
  s.metrics = path;
  const std::string file = fs::path(path).filename().string();
  s.name = file.substr(0, file.find('.'));
  if (s.name.empty() || s.name == "metrics") s.name = folder_name(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path());
  if (s.name.empty()) s.name = "run";  // (a metrics file at the root)
  return s;
}

std::string report_page(const ReportSources& sources) {
  nlohmann::json data = {{"name", sources.name},
                         {"generator", std::string("troupe-report ") + TROUPE_VERSION},
                         {"metrics_file", sources.metrics},
                         {"metrics", metrics_data(read_metrics(sources.metrics))},
                         {"trace_file", sources.trace},
                         {"trace", nullptr}};
  if (!sources.trace.empty())
    data["trace"] = trace_data(actors::summarize_trace(
        models::read_text_file(sources.trace, "--trace takes a Chrome trace written by a run's --trace"), sources.trace));
  // Names come from files and folders: bytes that are not UTF-8 are replaced rather than refused.
  return report_html(sources.name, data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void write_report(const ReportSources& sources, const std::string& out) {
  const std::string page = report_page(sources);
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  TROUPE_CHECK(f.good(), io, "cannot write the report '", out, "'; check the folder exists and is writable");
  f << page;
  f.flush();
  TROUPE_CHECK(f.good(), io, "writing the report '", out, "' failed (is the disk full?)");
}

}  // namespace troupe::apps
