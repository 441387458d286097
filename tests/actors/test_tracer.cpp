// The message-flow tracer: off by default, records every message and handler run when on; the
// Chrome JSON parses, every flow start has its end, counts match the protocol; the summary reads it.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "kernels/reference.hpp"
#include "troupe/actors/engine.hpp"
#include "troupe/actors/trace_summary.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;
using namespace troupe::actors;

namespace {
struct Counts {
  std::map<std::string, int> sends, handled;
  std::set<std::uint64_t> starts, ends;
  std::set<std::int64_t> tids, named_tids;
};

// Counts the events of step `step` (a late message of an earlier, untraced step may show up too).
Counts count(const nlohmann::json& doc, std::uint64_t step) {
  Counts c;
  auto of_step = [&](const nlohmann::json& e) { return e.contains("args") && e["args"].value("step", 0ull) == step; };
  for (const auto& e : doc.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if ((ph == "s" || ph == "X") && !of_step(e) && e.at("name") != "run") continue;
    if (ph == "s") {
      ++c.sends[e.at("name")];
      EXPECT_TRUE(c.starts.insert(e.at("id").get<std::uint64_t>()).second) << "flow id used twice";
      c.tids.insert(e.at("tid").get<std::int64_t>());
    } else if (ph == "f") {
      const auto id = e.at("id").get<std::uint64_t>();
      if (c.starts.count(id)) {
        EXPECT_TRUE(c.ends.insert(id).second) << "flow ended twice";
      }
    } else if (ph == "X") {
      if (e.at("name") != "compute") ++c.handled[e.at("name")];
      c.tids.insert(e.at("tid").get<std::int64_t>());
    } else if (ph == "M" && e.at("name") == "thread_name") {
      c.named_tids.insert(e.at("tid").get<std::int64_t>());
    }
  }
  return c;
}
}  // namespace

TEST(Tracer, RecordsEveryMessageOfAStep) {
  Tracer& tracer = Tracer::instance();
  EXPECT_FALSE(tracer.enabled());
  Generator gen(1);
  Linear lin(4, 3, gen);
  auto fn = [&](const std::vector<Var>& in) { return std::vector<Var>{mean(gelu(lin(in[0])))}; };
  Engine engine;
  ProgramOptions options;
  options.micro_batches = 2;
  auto program = engine.compile(trace(fn, {{"x", {-1, 4}}}).with_gradients(), options);
  const Tensor x = test::random_tensor({4, 4}, 2);
  program->run({x});  // off: nothing recorded
  tracer.clear();
  EXPECT_TRUE(tracer.events().empty());

  tracer.enable(true);
  program->run({x});
  // The caller's answer can overtake the step's last releases; wait until every message is handled.
  Counts c;
  for (int i = 0; i < 500; ++i) {
    c = count(nlohmann::json::parse(tracer.chrome_json()), 2);
    if (c.starts == c.ends) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  tracer.enable(false);
  EXPECT_EQ(c.starts, c.ends) << "every message sent was handled, and only those";
  EXPECT_GT(c.sends.at("ready"), 0);
  EXPECT_EQ(c.sends.at("ready"), c.handled.at("ready"));
  EXPECT_EQ(c.sends.at("ready"), c.sends.at("release")) << "each register read is released exactly once";
  EXPECT_EQ(c.sends.at("release"), c.handled.at("release"));
  const auto counts = program->actor_counts();
  EXPECT_EQ(c.sends.at("done"), counts.at("input") + counts.at("op"));
  EXPECT_EQ(c.sends.at("output"), counts.at("output"));
  // Each gradient goes from its stage straight to the actor that collects it, not through the program.
  EXPECT_EQ(c.sends.at("gradient"), counts.at("gradient"));
  EXPECT_EQ(c.handled.at("gradient"), counts.at("gradient"));
  EXPECT_EQ(c.sends.at("update"), 1) << "the program lets the one collector finish the step";
  EXPECT_EQ(c.sends.at("applied"), 1);
  EXPECT_EQ(c.sends.at("run"), 1);
  for (std::int64_t tid : c.tids) EXPECT_TRUE(c.named_tids.count(tid)) << "track " << tid << " has no name";

  const TraceSummary s = summarize_trace(tracer.chrome_json(), "trace.json");
  ASSERT_FALSE(s.steps.empty());
  ASSERT_EQ(s.steps.back().step, 2u);
  EXPECT_GT(s.steps.back().wall_us, 0);
  EXPECT_GT(s.steps.back().compute_us, 0);
  EXPECT_FALSE(s.steps.back().critical_path.empty());
  EXPECT_EQ(s.steps.back().critical_path.front(), "caller") << "the path starts where the step was requested";
  EXPECT_GE(s.messages, static_cast<int>(c.starts.size()));
  EXPECT_NE(format_summary(s).find("critical path"), std::string::npos);
  EXPECT_NO_THROW(nlohmann::json::parse(summary_json(s)));
  tracer.clear();
}

// How many kernels computed at once over a step's wall: two handlers on two tracks (0-100 us and
// 50-150 us) with kernels inside them (10-90 and 60-140 us): 2 at once 60-90, 1 at once 10-60 and
// 90-140, none 0-10 and 140-150.
TEST(Tracer, SummaryTellsHowManyKernelsComputedAtOnce) {
  const std::string trace = R"({"traceEvents":[
    {"ph":"X","name":"ready","tid":1,"ts":0,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":1,"ts":10,"dur":80,"args":{"step":1}},
    {"ph":"X","name":"ready","tid":2,"ts":50,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":2,"ts":60,"dur":80,"args":{"step":1}}]})";
  const TraceSummary s = summarize_trace(trace, "at_once.json");
  ASSERT_EQ(s.steps.size(), 1u);
  const std::vector<double>& at_once = s.steps[0].at_once;
  ASSERT_EQ(at_once.size(), 3u);
  EXPECT_NEAR(at_once[0], 20.0 / 150, 1e-12);
  EXPECT_NEAR(at_once[1], 100.0 / 150, 1e-12);
  EXPECT_NEAR(at_once[2], 30.0 / 150, 1e-12);
  EXPECT_NE(format_summary(s).find("kernels at once: 0 13%, 1 67%, 2 20% of the wall"), std::string::npos)
      << format_summary(s);
}

// A pool helper's compute slices (step kAnyStep) count in the step they overlap, clipped to its
// wall: the step of the test above with a helper joining the first kernel at 20-50 us, and a
// helper slice of another step (200-300 us) that it does not count.
TEST(Tracer, SummaryCountsThePoolHelpersInTheStepsTheyOverlap) {
  const std::string any = std::to_string(kAnyStep);
  const std::string trace = R"({"traceEvents":[
    {"ph":"X","name":"ready","tid":1,"ts":0,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":1,"ts":10,"dur":80,"args":{"step":1}},
    {"ph":"X","name":"ready","tid":2,"ts":50,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":2,"ts":60,"dur":80,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":3,"ts":20,"dur":30,"args":{"step":)" + any + R"(}},
    {"ph":"X","name":"compute","tid":3,"ts":200,"dur":100,"args":{"step":)" + any + R"(}}]})";
  const TraceSummary s = summarize_trace(trace, "helpers.json");
  ASSERT_EQ(s.steps.size(), 1u) << "the helpers' slices make no step of their own";
  const std::vector<double>& at_once = s.steps[0].at_once;
  ASSERT_EQ(at_once.size(), 3u);
  EXPECT_NEAR(at_once[0], 20.0 / 150, 1e-12);
  EXPECT_NEAR(at_once[1], 70.0 / 150, 1e-12);  // 10-20, 90-140
  EXPECT_NEAR(at_once[2], 60.0 / 150, 1e-12);  // 20-50 with the helper, 60-90
  EXPECT_NEAR(s.steps[0].wall_us, 150.0, 1e-12);
  EXPECT_NEAR(s.steps[0].compute_us, 190.0, 1e-12);
}

TEST(Tracer, SummaryRefusesWhatIsNotATrace) {
  EXPECT_THROW(summarize_trace("{not json", "bad.json"), Error);
  EXPECT_THROW(summarize_trace("{\"traceEvents\": 3}", "bad.json"), Error);
  // Events of the wrong shape are troupe::Errors too, never a stray conversion (1e300 into an integer).
  EXPECT_THROW(summarize_trace("[3]", "bad.json"), Error);
  EXPECT_THROW(summarize_trace(R"([{"ph":"X","tid":1e300}])", "bad.json"), Error);
  EXPECT_THROW(summarize_trace(R"([{"ph":"X","tid":1,"ts":"soon"}])", "bad.json"), Error);
  const TraceSummary empty = summarize_trace("[]", "empty.json");
  EXPECT_TRUE(empty.actors.empty());
  EXPECT_TRUE(empty.steps.empty());
}

// Communication in a trace: slices on "communicator ..." tracks count as communication; the part
// overlapping any actor's compute counts as hidden; the longest collectives are listed.
TEST(Tracer, SummaryReportsCommunicationAndTheHiddenPart) {
  const std::string json = R"([
    {"ph":"M","name":"thread_name","tid":1,"args":{"name":"matmul %3"}},
    {"ph":"M","name":"thread_name","tid":2,"args":{"name":"communicator allreduce"}},
    {"ph":"X","name":"ready","tid":1,"ts":0,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"compute","tid":1,"ts":10,"dur":80,"args":{"step":1}},
    {"ph":"X","name":"allreduce","tid":2,"ts":50,"dur":100,"args":{"step":1}},
    {"ph":"X","name":"allreduce","tid":2,"ts":160,"dur":30,"args":{"step":1}}
  ])";
  const actors::TraceSummary s = actors::summarize_trace(json, "test");
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(s.steps[0].communication_us, 130.0);
  EXPECT_DOUBLE_EQ(s.steps[0].hidden_us, 40.0);  // [50, 90) overlaps compute [10, 90)
  ASSERT_EQ(s.hottest_collectives.size(), 2u);
  EXPECT_EQ(s.hottest_collectives[0].us, 100.0);
  EXPECT_EQ(s.hottest_collectives[0].track, "communicator allreduce");
  EXPECT_NE(actors::format_summary(s).find("of which 40.0 us (31%) hidden behind compute"), std::string::npos)
      << actors::format_summary(s);
}

// Each actor's handler runs (kernel slices left out) and the runs along the critical path, timed
// from the trace's first slice: what troupe-report draws on its timeline.
TEST(Tracer, SummaryKeepsEachActorsRunsAndTheCriticalRuns) {
  const std::string json = R"([
    {"ph":"M","name":"thread_name","tid":1,"args":{"name":"input x"}},
    {"ph":"M","name":"thread_name","tid":2,"args":{"name":"matmul %3"}},
    {"ph":"X","name":"start","tid":1,"ts":1000,"dur":10,"args":{"step":1}},
    {"ph":"s","name":"ready","id":7,"tid":1,"ts":1005},
    {"ph":"X","name":"ready","tid":2,"ts":1020,"dur":50,"args":{"step":1}},
    {"ph":"f","name":"ready","id":7,"tid":2,"ts":1020},
    {"ph":"X","name":"compute","tid":2,"ts":1025,"dur":40,"args":{"step":1}},
    {"ph":"X","name":"release","tid":1,"ts":1030,"dur":5,"args":{"step":1}}
  ])";
  const actors::TraceSummary s = actors::summarize_trace(json, "test");
  ASSERT_EQ(s.actors.size(), 2u);
  EXPECT_EQ(s.actors[0].name, "matmul %3");
  ASSERT_EQ(s.actors[0].runs.size(), 1u);  // the compute slice is not a run of its own
  EXPECT_DOUBLE_EQ(s.actors[0].runs[0].start_us, 20.0);
  EXPECT_DOUBLE_EQ(s.actors[0].runs[0].us, 50.0);
  ASSERT_EQ(s.actors[1].runs.size(), 2u);
  EXPECT_DOUBLE_EQ(s.actors[1].runs[0].start_us, 0.0);
  EXPECT_DOUBLE_EQ(s.actors[1].runs[1].start_us, 30.0);
  ASSERT_EQ(s.steps.size(), 1u);
  // The step ends with the matmul's run, which input's start caused through its message.
  ASSERT_EQ(s.steps[0].critical_path, (std::vector<std::string>{"input x", "matmul %3"}));
  ASSERT_EQ(s.steps[0].critical_runs.size(), 2u);
  EXPECT_DOUBLE_EQ(s.steps[0].critical_runs[0].start_us, 0.0);
  EXPECT_DOUBLE_EQ(s.steps[0].critical_runs[0].us, 10.0);
  EXPECT_DOUBLE_EQ(s.steps[0].critical_runs[1].start_us, 20.0);
  EXPECT_DOUBLE_EQ(s.steps[0].critical_runs[1].us, 50.0);
}
