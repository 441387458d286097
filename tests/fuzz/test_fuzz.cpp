// A short fixed-seed fuzz run of every parser of outside bytes (safetensors, checkpoints, PNG
// images, corpora, the rendezvous handshake, strategy files, metrics files and traces, GPT-2
// tokenizer files and text): no input may escape as anything but a one-line
// troupe::Error, and each run must get past the formats' first checks (several distinct outcomes,
// some inputs accepted). The long runs are scripts/fuzz.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "fuzz/fuzz_driver.hpp"

using namespace troupe::fuzz;

namespace {

// Enough to cover each format's checks in a few seconds; scripts/fuzz.sh runs a million.
constexpr std::uint64_t kRuns = 4000;

class Fuzz : public ::testing::TestWithParam<std::string> {};

TEST_P(Fuzz, HostileInputsAreRefusedWithOneLineErrors) {
  const std::filesystem::path scratch =
      std::filesystem::temp_directory_path() / ("troupe_fuzz_" + std::to_string(::getpid()) + "_" + GetParam());
  std::filesystem::create_directories(scratch);
  for (const FuzzTarget& target : all_targets(scratch.string())) {
    if (target.name != GetParam()) continue;
    const FuzzStats stats = run_fuzz(target, kRuns, /*seed=*/12345);
    EXPECT_EQ(stats.inputs, kRuns);
    for (const std::string& defect : stats.defects) ADD_FAILURE() << target.name << ": " << defect;
    EXPECT_GE(stats.accepted, target.seeds.size() / 2) << "the seeds themselves must mostly load";
    EXPECT_GT(stats.refused, kRuns / 10) << "the mutations must reach the refusals";
    EXPECT_GE(stats.outcomes.size(), 4u) << "too few distinct outcomes: the run stalls at the first check";
    EXPECT_LT(stats.slowest_ms, 2000) << "one input took " << stats.slowest_ms << " ms";
  }
  std::filesystem::remove_all(scratch);
}

INSTANTIATE_TEST_SUITE_P(Targets, Fuzz,
                         ::testing::Values("safetensors", "checkpoint", "png", "corpus", "rendezvous", "strategy", "report",
                                           "tokenizer"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
