// The public API as a service uses it, through <troupe/troupe.hpp> alone: inference from eight
// threads at once gives exactly what one thread gives, with a Jit and with an actor Program, and
// the version header names the project's version.
#include <gtest/gtest.h>

#include <troupe/troupe.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace troupe;
using graph::Var;

namespace {

// A Transformer block over [batch, 8, 16]: attention, layer norms, an MLP.
struct Model : graph::Module {
  explicit Model(Generator& gen) : block(register_module("block", std::make_shared<graph::GPTBlock>(16, 2, gen))) {}
  Var operator()(const Var& x) { return (*block)(x); }
  std::shared_ptr<graph::GPTBlock> block;
};

std::vector<Tensor> queries(int n) {
  Generator gen(5);
  std::vector<Tensor> q;
  for (int i = 0; i < n; ++i) {
    Tensor x = Tensor::empty({1 + i % 3, 8, 16});  // three batch sizes, so shapes change between calls
    gen.uniform_(x, -1.0, 1.0);
    q.push_back(x);
  }
  return q;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)) == 0;
}

// Runs `call` on every query from eight threads at once, then from this one, and compares.
template <class Call>
void expect_concurrent_equals_serial(const std::vector<Tensor>& in, Call call) {
  std::vector<Tensor> concurrent(in.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t q = t; q < in.size(); q += 8) concurrent[q] = call(in[q]);
    });
  for (std::thread& t : threads) t.join();
  for (std::size_t q = 0; q < in.size(); ++q) EXPECT_TRUE(same_bits(call(in[q]), concurrent[q])) << "query " << q;
}

}  // namespace

TEST(PublicApi, JitInferenceFromEightThreadsEqualsOneThread) {
  Generator gen(1);
  Model model(gen);
  for (int level : {1, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    graph::Jit jit([&](const std::vector<Var>& in) { return std::vector<Var>{model(in[0])}; },
                   {{"x", {graph::SymDim::symbol("batch"), 8, 16}}}, false, level);
    expect_concurrent_equals_serial(queries(32), [&](const Tensor& x) { return jit({x})[0]; });
  }
}

TEST(PublicApi, ProgramInferenceFromEightThreadsEqualsOneThread) {
  Generator gen(2);
  Model model(gen);
  const graph::TracedFunction f =
      graph::trace([&](const std::vector<Var>& in) { return std::vector<Var>{model(in[0])}; },
                   {{"x", {graph::SymDim::symbol("batch"), 8, 16}}})
          .for_inference()
          .optimized(3);
  actors::Engine engine(actors::EngineOptions{2});
  const std::unique_ptr<actors::Program> program = engine.compile(f);
  expect_concurrent_equals_serial(queries(24), [&](const Tensor& x) { return program->run({x}).outputs[0]; });
}

TEST(PublicApi, VersionHeaderNamesTheProjectVersion) {
  EXPECT_EQ(std::string(TROUPE_VERSION), std::to_string(TROUPE_VERSION_MAJOR) + "." + std::to_string(TROUPE_VERSION_MINOR) +
                                             "." + std::to_string(TROUPE_VERSION_PATCH));
}
