// troupe-report and --report: metrics files read back (CSV and JSON lines alike, older files,
// resumed runs, bad input naming the file and the line), run folders, the page (Chart.js embedded,
// the data, nothing fetched), a trace's timeline rows and critical path, the page drawn in headless
// Chromium (its DOM and a screenshot), and a troupe-gpt run that writes its own report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "apps/app_runner.hpp"
#include "apps/chromium.hpp"
#include "fuzz/files.hpp"
#include "troupe/apps/corpus.hpp"
#include "troupe/apps/image.hpp"
#include "troupe/apps/metrics.hpp"
#include "troupe/apps/metrics_reader.hpp"
#include "troupe/apps/report.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;

namespace {

const std::string kReport = TROUPE_REPORT_BIN;
const std::string kGpt = TROUPE_GPT_BIN;

using fuzz::read_bytes;
using fuzz::write_bytes;

// `steps` records as the training loop writes them: the loss falling, the rate warming up over 10
// steps, a data-parallel step's communication, a validation every 5 steps, dynamic loss scaling
// that skipped step 7.
void write_metrics(const std::string& path, int steps) {
  apps::MetricsWriter w(path, /*append=*/false, "val_loss");
  for (int s = 1; s <= steps; ++s) {
    apps::StepMetrics m;
    m.step = s;
    m.loss = 5.0 / s;
    m.lr = 1e-3 * std::min(1.0, s / 10.0);
    m.grad_norm = 2.0 / s;
    m.grad_variance = 1e-4 / s;
    m.peak_bytes = static_cast<std::size_t>(64 + s) << 20;
    m.current_bytes = std::size_t{32} << 20;
    m.step_ms = 40 + s % 3;
    m.comm_ms = 12;
    m.exposed_comm_ms = 4;
    m.loss_scale = s < 7 ? 65536 : 32768;
    m.skipped = s == 7;
    m.evaluated = s % 5 == 0;
    m.eval = 6.0 / s;
    w.write(m);
  }
}

// The data a page charts: its <script id="run-data"> element.
nlohmann::json page_data(const std::string& page) {
  const std::string open = "<script id=\"run-data\" type=\"application/json\">";
  const std::size_t a = page.find(open);
  EXPECT_NE(a, std::string::npos);
  const std::size_t from = a + open.size();
  return nlohmann::json::parse(page.substr(from, page.find("</script>", from) - from));
}

// The message of the troupe::Error `fn` throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One traced step as the Tracer writes it: the caller's run starts the input, whose message makes
// the matmul run, which ends the step; the optimizer runs meanwhile, off the critical path.
const char* kTrace = R"({"traceEvents":[
  {"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"input x"}},
  {"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"matmul %3"}},
  {"ph":"M","name":"thread_name","pid":1,"tid":3,"args":{"name":"optimizer"}},
  {"ph":"X","name":"start","pid":1,"tid":1,"ts":1000,"dur":10,"args":{"step":1}},
  {"ph":"s","name":"ready","id":7,"pid":1,"tid":1,"ts":1005},
  {"ph":"X","name":"ready","pid":1,"tid":2,"ts":1020,"dur":50,"args":{"step":1}},
  {"ph":"f","bp":"e","name":"ready","id":7,"pid":1,"tid":2,"ts":1020},
  {"ph":"X","name":"compute","pid":1,"tid":2,"ts":1025,"dur":40,"args":{"step":1}},
  {"ph":"X","name":"update","pid":1,"tid":3,"ts":1012,"dur":30,"args":{"step":1}}
]})";

}  // namespace

TEST(ReportMetrics, CsvAndJsonLinesReadBackAlike) {
  const std::string dir = test::fresh_dir("report_formats");
  write_metrics(dir + "/m.csv", 12);
  write_metrics(dir + "/m.jsonl", 12);
  const apps::MetricsSeries csv = apps::read_metrics(dir + "/m.csv"), json = apps::read_metrics(dir + "/m.jsonl");
  for (const apps::MetricsSeries* m : {&csv, &json}) {
    SCOPED_TRACE(m->source);
    EXPECT_EQ(m->steps, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
    EXPECT_EQ(m->names, (std::vector<std::string>{"loss", "lr", "grad_norm", "grad_variance", "peak_bytes", "current_bytes",
                                                  "step_ms", "comm_ms", "exposed_comm_ms", "comm_bytes", "loss_scale", "skipped", "val_loss"}));
    EXPECT_NEAR(m->columns.at("loss")[2], 5.0 / 3, 1e-5);
    EXPECT_NEAR(m->columns.at("lr")[3], 4e-4, 1e-12);
    EXPECT_EQ(m->columns.at("peak_bytes")[0], 65.0 * (1 << 20));
    EXPECT_EQ(m->columns.at("comm_ms")[5], 12);
    EXPECT_EQ(m->columns.at("exposed_comm_ms")[5], 4);
    EXPECT_EQ(m->columns.at("skipped")[6], 1);
    EXPECT_EQ(m->columns.at("skipped")[7], 0);
    EXPECT_TRUE(std::isnan(m->columns.at("val_loss")[3])) << "no validation at step 4";
    EXPECT_NEAR(m->columns.at("val_loss")[4], 1.2, 1e-6);
    EXPECT_NEAR(m->columns.at("val_loss")[9], 0.6, 1e-6);
  }
}

// A file an older Troupe wrote (no lr, no communication; JSON lines with "nan"), a run resumed into
// it (its header kept), and steps a resumed run redid (the later record counts).
TEST(ReportMetrics, ReadsOlderFilesAndResumedRuns) {
  const std::string dir = test::fresh_dir("report_older");
  const std::string old_csv = dir + "/old.csv";
  write_bytes(old_csv,
        "step,loss,grad_norm,grad_variance,peak_bytes,current_bytes,step_ms,loss_scale,skipped,val_loss\n"
        "1,4.5,1.5,0.01,100,50,30.000,0,0,\n"
        "2,4.0,1.25,0.01,100,50,31.000,0,0,\n"
        "3,3.9,1.2,0.01,100,50,29.000,0,0,4.1\n"
        "3,3.5,1.1,0.01,100,50,29.000,0,0,3.8\n");
  {
    apps::MetricsWriter resumed(old_csv, /*append=*/true, "val_loss");
    apps::StepMetrics m;
    m.step = 4;
    m.loss = 3.25;
    m.lr = 1e-3;
    resumed.write(m);
  }
  const std::string text = read_bytes(old_csv);
  EXPECT_EQ(text.substr(text.rfind('\n', text.size() - 2) + 1), "4,3.25,0,0,0,0,0.000,0,0,\n")
      << "the appended row has the old header's columns";
  const apps::MetricsSeries m = apps::read_metrics(old_csv);
  EXPECT_EQ(m.steps, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(std::count(m.names.begin(), m.names.end(), "lr"), 0);
  EXPECT_EQ(m.columns.at("loss"), (std::vector<double>{4.5, 4.0, 3.5, 3.25}));
  EXPECT_EQ(m.columns.at("val_loss")[2], 3.8);

  write_bytes(dir + "/old.jsonl", "{\"step\":1,\"loss\":nan,\"grad_norm\":-inf,\"skipped\":true}\n\n"
                            "{\"step\":2,\"loss\":2.5,\"grad_norm\":1,\"skipped\":false}\n");
  const apps::MetricsSeries j = apps::read_metrics(dir + "/old.jsonl");
  EXPECT_EQ(j.steps, (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE(std::isnan(j.columns.at("loss")[0]));
  EXPECT_TRUE(std::isnan(j.columns.at("grad_norm")[0]));
  EXPECT_EQ(j.columns.at("skipped"), (std::vector<double>{1, 0}));
  EXPECT_EQ(j.columns.at("loss")[1], 2.5);
}

TEST(ReportMetrics, NonFiniteValuesAreNullInJsonLines) {
  const std::string path = test::fresh_dir("report_nonfinite") + "/m.jsonl";
  {
    apps::MetricsWriter w(path, false, "val_loss");
    apps::StepMetrics m;
    m.step = 1;
    m.loss = std::numeric_limits<double>::infinity();
    m.skipped = true;
    w.write(m);
  }
  const nlohmann::json line = nlohmann::json::parse(read_bytes(path));
  EXPECT_TRUE(line.at("loss").is_null());
  EXPECT_EQ(line.at("skipped"), true);
}

TEST(ReportMetrics, BadInputNamesTheFileAndTheLine) {
  const std::string dir = test::fresh_dir("report_bad");
  const std::string header = "step,loss,lr\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {header + "1,2.5,0.1\n2,abc,0.1\n", "line 3: column 'loss' holds 'abc', which is not a number"},
      {header + "1,2.5\n", "line 2: 2 cells where the header names 3 columns"},
      {"loss,lr\n2.5,0.1\n", "line 1: the header has no 'step' column"},
      {header + "1e300,2.5,0.1\n", "line 2: the step is missing or not a whole number"},
      {"{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\n", "line 2: not a JSON object"},
      {"{\"step\":1,\"loss\":\"low\"}\n", "line 1: \"loss\" is not a number"},
      {"{\"loss\":2}\n", "line 1: no integer \"step\""},
      {"\n \n", "is empty"},
      {header, "holds no steps yet"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir + "/bad" + std::to_string(i) + ".csv";
    write_bytes(path, cases[i].first);
    const std::string message = error_of([&] { apps::read_metrics(path); });
    EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(cases[i].second), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { apps::read_metrics(dir + "/none.csv"); }).find("does not exist; give a metrics file written by --metrics"),
            std::string::npos);
}

TEST(Report, FindsTheFilesOfARunFolder) {
  const std::string root = test::fresh_dir("report_folders");
  const std::string run = root + "/gpt-run";
  std::filesystem::create_directories(run);
  write_metrics(run + "/metrics.csv", 3);
  write_metrics(run + "/other.csv", 3);
  write_bytes(run + "/trace.json", kTrace);
  apps::ReportSources s = apps::find_report_sources(run, "");
  EXPECT_EQ(s.metrics, run + "/metrics.csv");
  EXPECT_EQ(s.trace, run + "/trace.json");
  EXPECT_EQ(s.name, "gpt-run");
  EXPECT_EQ(apps::find_report_sources(run + "/", "t.json").trace, "t.json") << "--trace wins over the folder's";

  const std::string one = root + "/one";
  std::filesystem::create_directories(one);
  write_metrics(one + "/steps.jsonl", 3);
  s = apps::find_report_sources(one, "");
  EXPECT_EQ(s.metrics, one + "/steps.jsonl");
  EXPECT_EQ(s.trace, "");

  const std::string two = root + "/two";
  std::filesystem::create_directories(two);
  write_metrics(two + "/a.csv", 3);
  write_metrics(two + "/b.jsonl", 3);
  EXPECT_NE(error_of([&] { apps::find_report_sources(two, ""); }).find("holds several metrics files (a.csv, b.jsonl); give the one to draw"),
            std::string::npos);
  std::filesystem::create_directories(root + "/empty");
  EXPECT_NE(error_of([&] { apps::find_report_sources(root + "/empty", ""); }).find("holds no metrics file"), std::string::npos);

  EXPECT_EQ(apps::find_report_sources(two + "/a.csv", "").name, "a");
  EXPECT_EQ(apps::find_report_sources(run + "/metrics.csv", "").name, "gpt-run");
}

TEST(Report, ThePageEmbedsChartJsAndTheData) {
  const std::string dir = test::fresh_dir("report_page");
  write_metrics(dir + "/m.csv", 20);
  const std::string page = apps::report_page({dir + "/m.csv", "", "<b>demo</b> & co"});
  const std::string chartjs = read_bytes(TROUPE_CHARTJS);
  ASSERT_GT(chartjs.size(), 10000u);
  EXPECT_NE(page.find("<script>" + chartjs + "</script>"), std::string::npos) << "Chart.js is not embedded whole";
  EXPECT_NE(page.find("content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'\""), std::string::npos)
      << "the page may fetch";
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_NE(page.find("<h1>&lt;b&gt;demo&lt;/b&gt; &amp; co</h1>"), std::string::npos);
  EXPECT_EQ(page.find("<b>demo"), std::string::npos);
  const nlohmann::json data = page_data(page);
  EXPECT_EQ(data.at("name"), "<b>demo</b> & co");
  EXPECT_EQ(data.at("metrics").at("steps").size(), 20u);
  EXPECT_EQ(data.at("metrics").at("columns").at("loss")[1], 2.5);
  EXPECT_EQ(data.at("metrics").at("columns").at("exposed_comm_ms")[0], 4);
  EXPECT_TRUE(data.at("metrics").at("columns").at("val_loss")[0].is_null());
  EXPECT_TRUE(data.at("trace").is_null());

  const std::string message = error_of([&] { apps::write_report({dir + "/m.csv", "", "x"}, dir + "/no/such/folder/r.html"); });
  EXPECT_NE(message.find("cannot write the report '" + dir + "/no/such/folder/r.html'"), std::string::npos) << message;
}

TEST(Report, TheTraceGivesTimelineRowsAndTheCriticalPath) {
  const std::string dir = test::fresh_dir("report_trace");
  write_metrics(dir + "/m.csv", 3);
  write_bytes(dir + "/t.json", kTrace);
  nlohmann::json trace = page_data(apps::report_page({dir + "/m.csv", dir + "/t.json", "r"})).at("trace");
  ASSERT_EQ(trace.at("rows").size(), 3u);
  EXPECT_EQ(trace.at("rows")[0].at("name"), "input x");  // in the order of their first run
  EXPECT_EQ(trace.at("rows")[1].at("name"), "optimizer");
  EXPECT_EQ(trace.at("rows")[2].at("name"), "matmul %3");
  EXPECT_EQ(trace.at("rows")[2].at("runs"), nlohmann::json::parse("[[20.0, 50.0]]"));
  ASSERT_EQ(trace.at("steps").size(), 1u);
  const nlohmann::json& path = trace.at("steps")[0].at("path");
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path[0].at("actor"), "input x");
  EXPECT_EQ(path[1].at("actor"), "matmul %3");
  EXPECT_EQ(path[1].at("start_us"), 20.0);
  EXPECT_EQ(trace.at("steps")[0].at("critical_path_us"), 60.0);

  // Sixty actors: the timeline keeps 40 rows, the critical path's first though it is the least busy.
  nlohmann::json events = nlohmann::json::array();
  for (int k = 0; k < 60; ++k) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"tid", k}, {"args", {{"name", "op " + std::to_string(k)}}}});
    events.push_back({{"ph", "X"}, {"name", "ready"}, {"tid", k}, {"ts", 10 * k}, {"dur", 1 + k}, {"args", {{"step", 1}}}});
  }
  events.push_back({{"ph", "X"}, {"name", "ready"}, {"tid", 0}, {"ts", 5000}, {"dur", 1}, {"args", {{"step", 1}}}});
  write_bytes(dir + "/many.json", events.dump());
  trace = page_data(apps::report_page({dir + "/m.csv", dir + "/many.json", "r"})).at("trace");
  EXPECT_EQ(trace.at("actors"), 60);
  ASSERT_EQ(trace.at("rows").size(), 40u);
  EXPECT_EQ(trace.at("rows")[0].at("name"), "op 0") << "the step ends with op 0's run: it is the critical path";
  EXPECT_EQ(trace.at("rows")[1].at("name"), "op 21") << "then the 39 busiest, by first run";
  EXPECT_EQ(trace.at("rows")[39].at("name"), "op 59");
}

TEST(ReportApp, WritesThePageAndFailsInOneLine) {
  const std::string dir = test::fresh_dir("report_app");
  write_metrics(dir + "/metrics.csv", 5);
  write_bytes(dir + "/trace.json", kTrace);
  write_bytes(dir + "/bad.csv", "step,loss\n1,x\n");
  write_bytes(dir + "/bad-trace.json", "{not json");
  const auto r = test::run_app(kReport + " " + dir + " -o " + dir + "/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("troupe-report: " + dir + "/r.html written (metrics " + dir + "/metrics.csv, trace " + dir + "/trace.json)"),
            std::string::npos) << r.output;
  const nlohmann::json data = page_data(read_bytes(dir + "/r.html"));
  EXPECT_EQ(data.at("metrics").at("steps").size(), 5u);
  EXPECT_EQ(data.at("trace").at("rows").size(), 3u);
  test::expect_clear_failures({
      {kReport + " " + dir + "/nothing -o " + dir + "/x.html", "'" + dir + "/nothing' does not exist"},
      {kReport + " " + dir + "/bad.csv -o " + dir + "/x.html", "'" + dir + "/bad.csv' line 2: column 'loss' holds 'x'"},
      {kReport + " " + dir + "/metrics.csv --trace " + dir + "/bad-trace.json -o " + dir + "/x.html", "not a JSON trace"},
      {kReport + " " + dir + "/metrics.csv", "--output is required"},
  });
}

// The page in headless Chromium: every chart draws (its canvas marked, the status line counting
// them, no script error), and a screenshot shows the lines, the stacked step time and the critical path.
TEST(Report, ThePageRendersInHeadlessChromium) {
  const std::string chromium = test::headless_chromium();
  if (chromium.empty()) GTEST_SKIP() << test::kNoChromium;
  const std::string dir = test::fresh_dir("report_browser");
  write_metrics(dir + "/m.csv", 60);
  write_bytes(dir + "/t.json", kTrace);
  apps::write_report({dir + "/m.csv", dir + "/t.json", "browser run"}, dir + "/r.html");
  const std::string url = "file://" + dir + "/r.html";
  const auto dom = test::run_app(chromium + "--dump-dom '" + url + "'");
  EXPECT_EQ(dom.output.find("data-error"), std::string::npos) << dom.output.substr(0, 4000);
  EXPECT_NE(dom.output.find("data-charts=\"7\""), std::string::npos) << dom.output.substr(dom.output.rfind("<main>"));
  EXPECT_NE(dom.output.find("<p id=\"status\">7 charts drawn</p>"), std::string::npos);
  for (const char* id : {"loss", "lr", "gradients", "step-time", "memory", "loss-scale", "timeline"})
    EXPECT_TRUE(std::regex_search(dom.output, std::regex(std::string("<canvas id=\"chart-") + id + "\"[^>]*data-rendered=\"true\"")))
        << id;
  EXPECT_NE(dom.output.find("Critical path of step 1"), std::string::npos);
  EXPECT_NE(dom.output.find("<h1>browser run</h1>"), std::string::npos);

  const std::string shot = dir + "/r.png";
  test::run_app(chromium + "--window-size=1200,2200 --screenshot=" + shot + " '" + url + "'");
  const Tensor image = apps::read_png(shot);
  ASSERT_EQ(image.shape(), (Shape{3, 2200, 1200}));
  const std::vector<float> px = image.to_vector<float>();
  const std::size_t plane = 2200 * 1200;
  // Pixels within 10/255 of a chart's colour (Chart.js draws lines and fills with it).
  auto count = [&](int r, int g, int b) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < plane; ++i)
      n += std::abs(px[i] * 255 - r) < 10 && std::abs(px[plane + i] * 255 - g) < 10 && std::abs(px[2 * plane + i] * 255 - b) < 10;
    return n;
  };
  EXPECT_GT(count(0x25, 0x63, 0xeb), 300u) << "the train loss line (and the current memory)";
  EXPECT_GT(count(0x7c, 0x3a, 0xed), 150u) << "the learning rate";
  EXPECT_GT(count(0xea, 0x58, 0x0c), 100u) << "the validation loss and the critical path";
}

// troupe-gpt --report without --metrics: the metrics go beside the report, which charts them and
// the trace; the learning rate column holds the rate the steps used.
TEST(ReportApp, ATrainingRunWritesItsReport) {
  const std::string dir = test::fresh_dir("report_gpt");
  write_bytes(dir + "/corpus.txt", apps::generated_corpus(20000));
  const std::string gpt = kGpt + " --d-model 32 --layers 1 --heads 2 --d-ff 64 --seq 16 --batch 4 --threads 1 --lr 3e-3"
                                 " --eval-every 3 --val-batches 2 --amp O0 --data " + dir + "/corpus.txt --steps 6";
  const auto r = test::run_app(gpt + " --trace " + dir + "/t.json --report " + dir + "/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("report of the run written to " + dir + "/r.html"), std::string::npos) << r.output;
  for (double lr : test::csv_column(dir + "/r.metrics.csv", "lr")) EXPECT_NEAR(lr, 3e-3, 1e-9);
  EXPECT_EQ(test::csv_column(dir + "/r.metrics.csv", "exposed_comm_ms"), std::vector<double>(6, 0.0)) << "one process";
  const nlohmann::json data = page_data(read_bytes(dir + "/r.html"));
  EXPECT_EQ(data.at("name"), "r");
  EXPECT_EQ(data.at("metrics").at("steps").size(), 6u);
  EXPECT_GT(data.at("metrics").at("columns").at("grad_norm")[0].get<double>(), 0) << "gradients are measured for the report";
  ASSERT_FALSE(data.at("trace").at("rows").empty());
  ASSERT_FALSE(data.at("trace").at("steps").empty());
  EXPECT_EQ(data.at("trace").at("steps")[0].at("path")[0].at("actor"), "caller");
  test::expect_clear_failures({{gpt + " --report " + dir + "/no/such/r.html", "cannot write the report '" + dir + "/no/such/r.html'"}});
}
