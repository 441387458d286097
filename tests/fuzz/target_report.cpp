// troupe-report on arbitrary files: the first byte picks what the rest of the input is (even: the
// metrics file, odd: a trace drawn beside good metrics), and the page is made from them.
#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/apps/metrics.hpp"
#include "troupe/apps/report.hpp"

namespace troupe::fuzz {

namespace {

// Three steps as the training loop writes them, the third evaluated, in `path`'s format.
void write_steps(const std::string& path) {
  apps::MetricsWriter w(path, /*append=*/false, "val_loss");
  for (int s = 1; s <= 3; ++s) {
    apps::StepMetrics m;
    m.step = s;
    m.loss = 4.0 / s;
    m.lr = 1e-3;
    m.grad_norm = 1.5;
    m.step_ms = 20;
    m.evaluated = s == 3;
    m.eval = 1.5;
    w.write(m);
  }
}

// A step of two actors, one message between them (the Tracer's format).
constexpr const char* kTrace = R"({"traceEvents":[
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"input x"}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"matmul %3"}},
{"ph":"X","name":"start","pid":1,"tid":1,"ts":1000.5,"dur":10,"args":{"step":1,"bytes":0}},
{"ph":"s","name":"ready","cat":"message","id":7,"pid":1,"tid":1,"ts":1005},
{"ph":"X","name":"ready","pid":1,"tid":2,"ts":1020,"dur":50,"args":{"step":1}},
{"ph":"f","bp":"e","name":"ready","id":7,"pid":1,"tid":2,"ts":1020},
{"ph":"X","name":"compute","pid":1,"tid":2,"ts":1025,"dur":40,"args":{"step":1}}]})";

}  // namespace

FuzzTarget report_target(const std::string& scratch) {
  const std::string csv = scratch + "/good.csv", jsonl = scratch + "/good.jsonl", metrics = scratch + "/metrics.csv",
                    trace = scratch + "/trace.json";
  write_steps(csv);
  write_steps(jsonl);
  FuzzTarget t;
  t.name = "report";
  t.seeds = {std::string(1, '\0') + read_bytes(csv), std::string(1, '\0') + read_bytes(jsonl), std::string("\1") + kTrace};
  t.dictionary = {"step", "loss", "lr", "val_loss", "skipped", "{\"step\":", "null", "nan", "-inf", "true", "1e300",
                  "\"traceEvents\"", "\"ph\":\"X\"", "\"ph\":\"s\"", "\"ph\":\"f\"", "\"ph\":\"M\"", "\"tid\":",
                  "\"ts\":", "\"dur\":", "\"id\":", "thread_name", "compute", "communicator"};
  t.run = [=](const std::string& input) {
    if (input.empty()) return std::string("empty");
    const bool is_trace = input[0] & 1;
    write_bytes(is_trace ? trace : metrics, input.substr(1));
    const std::string page = apps::report_page({is_trace ? csv : metrics, is_trace ? trace : "", "fuzz"});
    return std::string(page.empty() ? "no page" : is_trace ? "trace drawn" : "metrics drawn");
  };
  return t;
}

}  // namespace troupe::fuzz
