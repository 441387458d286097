// Graph passes on hand-built graphs: the pattern each pass must rewrite and the near-misses it must
// leave alone; the results are bit-identical to the graph as written. The checker's errors and
// TROUPE_DUMP_GRAPH's files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "graph/pass_testing.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/passes.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"

using namespace troupe;
using namespace troupe::graph;
using test::count_ops;
using test::expect_same_results;

namespace {
const ValueInfo kF23{DType::f32, {2, 3}};

Attrs value_attr(double v) { return Attrs().set("value", v); }
ValueId out0(const Graph& g, NodeId n) { return g.node(n).outputs[0]; }

// tanh(op(a, constants...)) with input x [2, 3]; a = relu(x) (dense) or, with `dense` false, x
// itself, whose layout is the caller's. `constant_first` puts the constant on the left.
Graph arithmetic_graph(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& constants = {},
                       bool dense = true, bool constant_first = false) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  std::vector<ValueId> ins{dense ? out0(g, g.add_node("relu", {x})) : x};
  for (const Tensor& c : constants) ins.push_back(g.add_constant(c));
  if (constant_first) std::swap(ins[0], ins[1]);
  g.add_output(out0(g, g.add_node("tanh", {out0(g, g.add_node(op, ins, attrs))})));
  return g;
}

// A graph with input x [2, 3, 4] and the output f(x) built by `build`.
template <class F>
Graph graph_of(const SymShape& shape, F&& build) {
  Graph g;
  const ValueId x = g.add_input("x", {DType::f32, shape});
  g.add_output(build(g, x));
  return g;
}

ValueId permute_node(Graph& g, ValueId x, std::vector<std::int64_t> dims) {
  return out0(g, g.add_node("permute", {x}, Attrs().set("dims", std::move(dims))));
}
ValueId reshape_node(Graph& g, ValueId x, const SymShape& shape) { return out0(g, g.add_node("reshape", {x}, {}, shape)); }
ValueId relu_node(Graph& g, ValueId x) { return out0(g, g.add_node("relu", {x})); }

std::vector<Tensor> inputs23() { return {test::random_tensor({2, 3}, 7)}; }
}  // namespace

TEST(ConstantFolding, FoldsChainsOfConstantsIntoOneConstant) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  const ValueId c = g.add_constant(test::random_tensor({3}, 1));
  const ValueId e = out0(g, g.add_node("exp", {c}));
  const ValueId h = out0(g, g.add_node("mul_scalar", {e}, value_attr(0.5)));
  g.add_output(out0(g, g.add_node("add", {x, h})));
  const Graph f = fold_constants(g);
  check_graph(f);
  EXPECT_EQ(f.nodes().size(), 1u) << f.dump();
  EXPECT_EQ(count_ops(f, "exp"), 0);
  expect_same_results(g, f, inputs23());
}

TEST(ConstantFolding, FoldsZerosLikeOfAFixedShapeOnly) {
  Graph g;
  const ValueId x = g.add_input("x", {DType::f32, {SymDim::symbol("batch"), 3}});
  const ValueId s = out0(g, g.add_node("sum", {x}, Attrs().set("axes", std::vector<std::int64_t>{})));
  const ValueId one = out0(g, g.add_node("add_scalar", {out0(g, g.add_node("zeros_like", {s}))}, value_attr(1.0)));
  const ValueId dyn = out0(g, g.add_node("zeros_like", {x}));  // [batch, 3]: not known until run time
  g.add_output(out0(g, g.add_node("add", {dyn, one})));
  const Graph f = fold_constants(g);
  EXPECT_EQ(count_ops(f, "zeros_like"), 1) << f.dump();
  EXPECT_EQ(count_ops(f, "add_scalar"), 0) << f.dump();
  expect_same_results(g, f, {test::random_tensor({4, 3}, 3)});
}

TEST(ConstantFolding, LeavesParametersOutputsAndSideEffects) {
  Graph g;
  const ValueId p = g.add_parameter("w", kF23);
  const ValueId c = g.add_constant(test::random_tensor({2, 3}, 2));
  const ValueId reads_param = out0(g, g.add_node("mul", {p, c}));
  const NodeId printed = g.add_node("debug_print", {c});
  g.mutable_node(printed).label = "c";
  const ValueId output_of_constants = out0(g, g.add_node("tanh", {c}));
  g.add_output(reads_param);
  g.add_output(output_of_constants);
  const Graph f = fold_constants(g);
  EXPECT_EQ(f.nodes().size(), 3u) << f.dump();
  EXPECT_EQ(count_ops(f, "debug_print"), 1);
  EXPECT_EQ(count_ops(f, "tanh"), 1) << "a graph output stays an op output";
}


TEST(AlgebraicSimplification, DropsArithmeticThatGivesTheInputBack) {
  const Tensor ones23 = Tensor::full({2, 3}, 1.0), ones3 = Tensor::full({3}, 1.0);
  const Tensor minus_zero = Tensor::full({3}, -0.0), plus_zero = Tensor::full({2, 3}, 0.0);
  const std::vector<std::pair<std::string, Graph>> cases = {
      {"mul_scalar", arithmetic_graph("mul_scalar", value_attr(1.0))},
      {"add_scalar", arithmetic_graph("add_scalar", value_attr(-0.0))},
      {"mul", arithmetic_graph("mul", {}, {ones23})},
      {"mul", arithmetic_graph("mul", {}, {ones3}, true, true)},
      {"div", arithmetic_graph("div", {}, {ones3})},
      {"add", arithmetic_graph("add", {}, {minus_zero}, true, true)},
      {"sub", arithmetic_graph("sub", {}, {plus_zero})}};
  for (const auto& [op, g] : cases) {
    const Graph f = simplify_algebra(g);
    check_graph(f);
    EXPECT_EQ(count_ops(f, op), 0) << f.dump();
    expect_same_results(g, f, inputs23());
  }
}

TEST(AlgebraicSimplification, LeavesNearMisses) {
  Graph overridden = arithmetic_graph("mul_scalar", value_attr(1.0));
  overridden.mutable_node(1).gradient = kStraightThrough;
  const std::vector<std::pair<std::string, Graph>> cases = {
      {"x + 0 turns -0 into +0", arithmetic_graph("add_scalar", value_attr(0.0))},
      {"x - (-0) turns -0 into +0", arithmetic_graph("sub", {}, {Tensor::full({3}, -0.0)})},
      {"not exactly one", arithmetic_graph("mul_scalar", value_attr(1.0000001))},
      {"one element is not one", arithmetic_graph("mul", {}, {Tensor::from_vector<float>({1, 1, 2}, {3})})},
      {"1 / x is not x", arithmetic_graph("div", {}, {Tensor::full({3}, 1.0)}, true, true)},
      {"broadcasting makes the result larger", arithmetic_graph("mul", {}, {Tensor::full({4, 2, 3}, 1.0)})},
      {"the input's layout is unknown", arithmetic_graph("mul_scalar", value_attr(1.0), {}, false)},
      {"a gradient override", overridden}};
  for (const auto& [why, g] : cases) {
    const Graph f = simplify_algebra(g);
    EXPECT_EQ(f.dump(), g.dump()) << why;
  }
}

TEST(AlgebraicSimplification, ComposesPermutes) {
  const SymShape s{2, 3, 4};
  const Graph back = graph_of(s, [](Graph& g, ValueId x) { return relu_node(g, permute_node(g, permute_node(g, x, {1, 0, 2}), {1, 0, 2})); });
  const Graph rotate = graph_of(s, [](Graph& g, ValueId x) { return relu_node(g, permute_node(g, permute_node(g, x, {1, 2, 0}), {1, 2, 0})); });
  const Graph identity = graph_of(s, [](Graph& g, ValueId x) { return relu_node(g, permute_node(g, x, {0, 1, 2})); });
  const std::vector<Tensor> in{test::random_tensor({2, 3, 4}, 5)};
  const Graph b = eliminate_dead_code(simplify_algebra(back)), r = eliminate_dead_code(simplify_algebra(rotate));
  EXPECT_EQ(count_ops(b, "permute"), 0) << b.dump();
  ASSERT_EQ(count_ops(r, "permute"), 1) << r.dump();
  EXPECT_EQ(r.node(0).attrs.get_ints("dims"), (std::vector<std::int64_t>{2, 0, 1}));
  EXPECT_EQ(count_ops(simplify_algebra(identity), "permute"), 0);
  for (const Graph* g : {&back, &rotate, &identity}) expect_same_results(*g, eliminate_dead_code(simplify_algebra(*g)), in);
}

TEST(AlgebraicSimplification, KeepsPermutesWithAGradientOverride) {
  Graph g = graph_of({2, 3, 4}, [](Graph& g, ValueId x) { return relu_node(g, permute_node(g, permute_node(g, x, {1, 0, 2}), {1, 0, 2})); });
  g.mutable_node(0).gradient = kStraightThrough;
  EXPECT_EQ(count_ops(eliminate_dead_code(simplify_algebra(g)), "permute"), 2);
}

TEST(AlgebraicSimplification, CollapsesReshapeChainsOfDenseValues) {
  const SymShape s{2, 3, 4};
  auto chain = [](bool dense, SymShape last) {
    return graph_of({2, 3, 4}, [=](Graph& g, ValueId x) {
      return relu_node(g, reshape_node(g, reshape_node(g, dense ? relu_node(g, x) : x, {6, 4}), last));
    });
  };
  const std::vector<Tensor> in{test::random_tensor({2, 3, 4}, 6)};
  const Graph to_other = chain(true, {4, 6}), to_same = chain(true, {2, 3, 4}), unknown = chain(false, {4, 6});
  const Graph one_reshape = graph_of(s, [](Graph& g, ValueId x) { return relu_node(g, reshape_node(g, relu_node(g, x), {2, 3, 4})); });
  EXPECT_EQ(count_ops(eliminate_dead_code(simplify_algebra(to_other)), "reshape"), 1);
  EXPECT_EQ(count_ops(eliminate_dead_code(simplify_algebra(to_same)), "reshape"), 0);
  EXPECT_EQ(count_ops(eliminate_dead_code(simplify_algebra(one_reshape)), "reshape"), 0);
  EXPECT_EQ(count_ops(eliminate_dead_code(simplify_algebra(unknown)), "reshape"), 2) << "x's layout is unknown";
  for (const Graph* g : {&to_other, &to_same, &one_reshape, &unknown})
    expect_same_results(*g, eliminate_dead_code(simplify_algebra(*g)), in);
}

TEST(CommonSubexpressions, MergesIdenticalNodes) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  const ValueId w = g.add_parameter("w", {DType::f32, {3, 3}});
  const Attrs split_attrs = Attrs().set("sizes", std::vector<std::int64_t>{1, 2}).set("axis", std::int64_t{1});
  const ValueId a = out0(g, g.add_node("matmul", {x, w}, Attrs().set("trans_a", std::int64_t{0}).set("trans_b", std::int64_t{0})));
  const ValueId b = out0(g, g.add_node("matmul", {x, w}, Attrs().set("trans_a", std::int64_t{0}).set("trans_b", std::int64_t{0})));
  const ValueId s1 = g.node(g.add_node("split", {a}, split_attrs)).outputs[1];
  const ValueId s2 = g.node(g.add_node("split", {b}, split_attrs)).outputs[1];
  g.add_output(out0(g, g.add_node("mul", {s1, s2})));
  const Graph f = eliminate_common_subexpressions(g);
  check_graph(f);
  EXPECT_EQ(count_ops(f, "matmul"), 1) << f.dump();
  EXPECT_EQ(count_ops(f, "split"), 1) << f.dump();
  expect_same_results(g, f, inputs23(), {test::random_tensor({3, 3}, 8)});
}

TEST(CommonSubexpressions, KeepsNodesThatDifferInAttributesOverridesOrEffects) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  auto node = [&](const std::string& op, const Attrs& attrs = {}) { return out0(g, g.add_node(op, {x}, attrs)); };
  std::vector<ValueId> outs = {node("mul_scalar", value_attr(0.5)), node("mul_scalar", value_attr(0.25)),
                               node("add_scalar", value_attr(0.0)), node("add_scalar", value_attr(-0.0)),
                               node("relu"), node("relu"), node("debug_print"), node("debug_print")};
  g.mutable_node(5).gradient = kStraightThrough;
  ValueId sum = outs[0];
  for (std::size_t k = 1; k < outs.size(); ++k) sum = out0(g, g.add_node("add", {sum, outs[k]}));
  g.add_output(sum);
  const Graph f = eliminate_common_subexpressions(g);
  EXPECT_EQ(f.dump(), g.dump());
}

TEST(CommonSubexpressions, MergesOnlyInsideOneCustomGradientRegion) {
  auto fn = trace([](const std::vector<Var>& in) { return std::vector<Var>{custom_relu(in[0]) + custom_relu(in[0]) + relu(in[0])}; },
                  {{"x", {2, 3}}});
  const Graph f = eliminate_common_subexpressions(fn.graph());
  check_graph(f);
  EXPECT_EQ(count_ops(f, "relu"), 3) << "each region keeps its own relu, and the plain one stays outside";
  EXPECT_EQ(f.regions().size(), 2u);
}

TEST(CommonSubexpressions, KeepsGraphOutputsDistinct) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  g.add_output(out0(g, g.add_node("relu", {x})));
  g.add_output(out0(g, g.add_node("relu", {x})));
  const Graph f = eliminate_common_subexpressions(g);
  EXPECT_EQ(count_ops(f, "relu"), 2) << "a caller may write into one output; the other must not change";
  EXPECT_NE(f.outputs()[0], f.outputs()[1]);
}

TEST(DeadCode, RemovesWhatNoOutputReadsButKeepsPrints) {
  Graph g;
  const ValueId x = g.add_input("x", kF23);
  g.add_parameter("unused", kF23);
  const ValueId c = g.add_constant(Tensor::full({2, 3}, 2.0));
  const ValueId dead = out0(g, g.add_node("mul", {x, c}));
  g.add_node("exp", {dead});
  g.add_node("debug_print", {x});
  g.add_output(out0(g, g.add_node("relu", {x})));
  const Graph f = eliminate_dead_code(g);
  check_graph(f);
  EXPECT_EQ(count_ops(f, "mul") + count_ops(f, "exp"), 0) << f.dump();
  EXPECT_EQ(count_ops(f, "debug_print"), 1);
  EXPECT_EQ(f.parameters().size(), 1u) << "parameters are part of the signature";
  for (const Value& v : f.values()) EXPECT_NE(v.kind, ValueKind::constant) << "the constant only fed dead nodes";
}

TEST(DeadCode, KeepsOrDropsACustomGradientRegionWhole) {
  auto two_outputs = [](const std::vector<Var>& in) {
    return custom_gradient("pair", [](const std::vector<Var>& v) { return std::vector<Var>{relu(v[0]), exp(v[0])}; },
                           [](const GradContext& c) { return std::vector<Var>{c.grad_output(0)}; }, in);
  };
  auto half_used = trace([&](const std::vector<Var>& in) { return std::vector<Var>{two_outputs(in)[0]}; }, {{"x", {2, 3}}});
  auto unused = trace([&](const std::vector<Var>& in) { two_outputs(in); return std::vector<Var>{in[0] * 2.0}; }, {{"x", {2, 3}}});
  const Graph kept = eliminate_dead_code(half_used.graph()), dropped = eliminate_dead_code(unused.graph());
  check_graph(kept);
  check_graph(dropped);
  EXPECT_EQ(count_ops(kept, "exp"), 1) << "the unused output of a live region stays";
  EXPECT_EQ(kept.regions().size(), 1u);
  EXPECT_EQ(dropped.regions().size(), 0u);
  EXPECT_EQ(dropped.nodes().size(), 1u) << dropped.dump();
}

TEST(GraphChecker, RejectsBrokenGraphsNamingTheRule) {
  auto base = [] {
    return graph_of({2, 3, 4}, [](Graph& g, ValueId x) { return relu_node(g, permute_node(g, relu_node(g, x), {1, 0, 2})); });
  };
  auto expect_rejected = [](const Graph& g, const std::string& words) {
    try {
      check_graph(g);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(check_graph(base()));
  Graph later = base();
  later.mutable_node(0).inputs = {later.node(2).outputs[0]};
  expect_rejected(later, "which does not come before");
  Graph wrong_info = base();
  wrong_info.mutable_node(1).attrs.set("dims", std::vector<std::int64_t>{2, 1, 0});
  expect_rejected(wrong_info, "but inference gives f32[4, 3, 2]");
  Graph unknown_rule = base();
  unknown_rule.mutable_node(0).gradient = "no-such-rule";
  expect_rejected(unknown_rule, "gradient override 'no-such-rule' is not registered");
  Graph no_region = base();
  no_region.mutable_node(2).region = 3;
  expect_rejected(no_region, "names custom gradient region 3, which does not exist");
  Graph missing = base();
  missing.add_output(99);
  expect_rejected(missing, "value %99 is not in the graph");
}

TEST(GraphChecker, AcceptsAnEmptyCustomGradientRegion) {
  auto fn = trace([](const std::vector<Var>& in) {
    const auto same = custom_gradient("same", [](const std::vector<Var>& v) { return v; },
                                      [](const GradContext& c) { return std::vector<Var>{c.grad_output(0)}; }, in);
    return std::vector<Var>{relu(same[0])};
  }, {{"x", {2, 3}}});
  ASSERT_EQ(fn.graph().regions().size(), 1u);
  EXPECT_NO_THROW(check_graph(fn.graph()));
  EXPECT_NO_THROW(optimize(fn.graph(), 2, {true, ""}));
}

TEST(GraphChecker, RejectsRewritesThatChangeTheSignature) {
  Graph a, b;
  a.add_input("x", kF23);
  a.add_parameter("w", kF23);
  b.add_input("x", kF23);
  b.add_parameter("v", kF23);
  try {
    check_rewrite(a, b, "example");
    ADD_FAILURE() << "accepted a renamed parameter";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("graph pass 'example' changed parameters 0 from 'w'"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, TroupeDisablePassesSkipsTheNamedPasses) {
  const Graph g = arithmetic_graph("mul_scalar", value_attr(1.0));
  ::setenv("TROUPE_DISABLE_PASSES", "algebraic-simplification,memory-planning", 1);
  OptimizeOptions options;
  std::vector<PassStat> stats;
  const Graph kept = optimize(g, 2, options, &stats);
  EXPECT_EQ(kept.nodes().size(), 3u) << "x*1 stays without algebraic simplification";
  EXPECT_EQ(stats.size(), 3u);
  ::setenv("TROUPE_DISABLE_PASSES", "constant-folding,no-such-pass", 1);
  try {
    disabled_passes_from_env();
    FAIL() << "an unknown pass name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'no-such-pass'; the passes are:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layout-choice"), std::string::npos) << e.what();
  }
  ::unsetenv("TROUPE_DISABLE_PASSES");
  EXPECT_TRUE(disabled_passes_from_env().empty());
}

TEST(Pipeline, RunsThePassesOfEachLevel) {
  EXPECT_TRUE(pipeline(0).empty());
  EXPECT_TRUE(pipeline(1).empty());
  std::vector<std::string> two, three;
  for (const Pass& p : pipeline(2)) two.push_back(p.name);
  for (const Pass& p : pipeline(3)) three.push_back(p.name);
  EXPECT_EQ(two, (std::vector<std::string>{"constant-folding", "algebraic-simplification", "cse", "dce"}));
  two.push_back("attention-fusion");
  two.push_back("causal-softmax-fusion");
  two.push_back("bias-gelu-fusion");
  two.push_back("matmul-bias-fusion");
  two.push_back("product-cast-fusion");
  two.push_back("add-layer-norm-fusion");
  two.push_back("norm-cast-fusion");
  two.push_back("conv-relu-fusion");
  two.push_back("elementwise-fusion");
  two.push_back("recomputation");
  EXPECT_EQ(three, two);
  EXPECT_THROW(pipeline(4), Error);
  const Graph g = arithmetic_graph("mul_scalar", value_attr(1.0));
  EXPECT_EQ(optimize(g, 1).dump(), g.dump());
  std::vector<PassStat> stats;
  const Graph f = optimize(g, 2, {true, ""}, &stats);
  ASSERT_EQ(stats.size(), 4u);
  EXPECT_EQ(stats[1].pass, "algebraic-simplification");
  EXPECT_EQ(stats[1].nodes_before, 3u);
  EXPECT_EQ(stats[1].nodes_after, 2u);
  EXPECT_EQ(f.nodes().size(), 2u);
}

TEST(Pipeline, JitAtLevelTwoRunsTheOptimisedGraph) {
  auto fn = [](const std::vector<Var>& in) { return std::vector<Var>{tanh(relu(in[0]) * 1.0) + in[0] * 1.0}; };
  const Jit one(fn, {{"x", {2, 3}}}, false, 1), two(fn, {{"x", {2, 3}}}, false, 2);
  EXPECT_EQ(one.traced_function().graph().nodes().size(), 5u);
  EXPECT_EQ(two.traced_function().graph().nodes().size(), 4u) << two.traced_function().graph().dump();
  EXPECT_TRUE(test::same_bits(one(inputs23())[0], two(inputs23())[0]));
}

TEST(DumpGraph, WritesTheGraphBeforeAndAfterEachPass) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("troupe-dump-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Graph g = arithmetic_graph("mul_scalar", value_attr(1.0));
  const Graph f = optimize(g, 2, {true, dir.string()});
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 5u);
  const std::vector<std::string> stages{"input", "constant-folding", "algebraic-simplification", "cse", "dce"};
  for (std::size_t k = 0; k < names.size(); ++k) EXPECT_NE(names[k].find("-" + stages[k] + ".txt"), std::string::npos) << names[k];
  std::ifstream first(dir / names.front()), last(dir / names.back());
  std::stringstream a, b;
  a << first.rdbuf();
  b << last.rdbuf();
  EXPECT_EQ(a.str(), g.dump());
  EXPECT_EQ(b.str(), f.dump());
  std::filesystem::remove_all(dir);
}

TEST(DumpGraph, ReadsTheEnvironmentAndRefusesAFolderItCannotWrite) {
  ::setenv("TROUPE_DUMP_GRAPH", "no-such-folder/graphs", 1);
  const OptimizeOptions options;
  ::unsetenv("TROUPE_DUMP_GRAPH");
  EXPECT_EQ(options.dump_dir, "no-such-folder/graphs");
  try {
    optimize(arithmetic_graph("relu", {}), 2, options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("TROUPE_DUMP_GRAPH: cannot write 'no-such-folder/graphs/"), std::string::npos)
        << e.what();
  }
}
