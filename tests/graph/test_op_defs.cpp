// The op definitions: every op runs either a registry kernel or a compute function, a kernel name
// is checked when the op registers, and a kernel op dispatches the kernel it names, with the
// node's attributes, in eager, traced and executed graphs alike.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/elementwise_chain.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/select.hpp"

using namespace troupe;
using namespace troupe::graph;

namespace {

std::vector<ValueInfo> infer_first(const InferContext& c) { return {c.inputs[0]}; }
std::vector<Tensor> pass_through(const std::vector<Tensor>& in, const ComputeContext&) { return {in[0]}; }

std::string add_error(OpDef def) {
  try {
    OpRegistry::instance().add(std::move(def));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OpDefs, EveryOpRunsExactlyOneOfKernelComputeAndCollective) {
  int collectives = 0, point_to_point = 0;
  for (const std::string& name : OpRegistry::instance().names()) {
    const OpDef& def = OpRegistry::instance().get(name);
    EXPECT_EQ(name, def.name);
    EXPECT_EQ((def.kernel != nullptr) + (def.compute != nullptr) + (def.collective != nullptr), 1) << name;
    collectives += def.collective != nullptr && !def.point_to_point;
    point_to_point += def.point_to_point;
    EXPECT_TRUE(!def.point_to_point || def.collective) << name << ": point to point, yet not a collective";
    if (def.kernel) {
      EXPECT_TRUE(KernelRegistry::instance().contains(def.kernel, DeviceKind::cpu, DType::f32)) << name;
    }
  }
  EXPECT_EQ(collectives, 3);     // all_reduce, all_gather, reduce_scatter
  EXPECT_EQ(point_to_point, 2);  // pipe_send, pipe_recv
}

TEST(OpDefs, BadDefinitionsAreRefusedNamingTheOp) {
  EXPECT_NE(add_error({.name = "test_both", .infer = infer_first, .kernel = "gelu", .compute = pass_through})
                .find("'test_both' needs exactly one of .kernel, .compute and .collective"),
            std::string::npos);
  EXPECT_NE(add_error({.name = "test_neither", .infer = infer_first}).find("'test_neither' needs exactly one"),
            std::string::npos);
  EXPECT_NE(add_error({.name = "test_typo", .infer = infer_first, .kernel = "gleu"})
                .find("op 'test_typo' runs kernel 'gleu', which has no CPU f32 kernel"),
            std::string::npos);
  EXPECT_NE(add_error({.name = "gelu", .infer = infer_first, .kernel = "gelu"}).find("'gelu' is defined twice"),
            std::string::npos);
  EXPECT_NE(add_error({.infer = infer_first, .kernel = "gelu"}).find("needs .name and .infer"), std::string::npos);
  for (const char* refused : {"test_both", "test_neither", "test_typo"})
    EXPECT_THROW(OpRegistry::instance().get(refused), Error) << refused;
}

TEST(OpDefs, KernelOpsDispatchTheirKernelWithTheNodesAttributes) {
  const Tensor x = test::random_tensor({3, 5}, 7), g = test::random_tensor({3, 5}, 8);
  EXPECT_EQ(test::values(gelu(Var(x)).tensor()), test::values(kernels::unary(kernels::UnaryOp::gelu, x)));
  EXPECT_EQ(test::values((Var(x) * 2.5).tensor()), test::values(kernels::mul(x, 2.5)));
  EXPECT_EQ(test::values(relu_backward(Var(g), Var(x), 0.25).tensor()), test::values(kernels::relu_backward(g, x, 0.25)));

  // The same ops traced and run by the executor: one kernel call each, the same values.
  Graph graph;
  const Var in = Var::symbolic(&graph, graph.add_input("x", ValueInfo{DType::f32, {3, 5}}));
  const Var y = relu_backward(gelu(in) * 2.5, in, 0.25);
  const std::vector<Tensor> out = execute(graph, {x}, {}, {y.id()});
  const Tensor expected = kernels::relu_backward(kernels::mul(kernels::unary(kernels::UnaryOp::gelu, x), 2.5), x, 0.25);
  EXPECT_EQ(test::values(out[0]), test::values(expected));
}

namespace {
std::vector<Tensor> one_row_too_many(const std::vector<Tensor>& in, const ComputeContext&) {
  return {Tensor::zeros({in[0].shape()[0] + 1, in[0].shape()[1]})};
}
TROUPE_DEFINE_OP({.name = "test_disagrees_with_inference", .infer = infer_first, .compute = one_row_too_many});
}  // namespace

TEST(OpDefs, OutputsThatDisagreeWithInferenceAreCaughtWhereverTheOpRuns) {
  const std::string expected = "test_disagrees_with_inference: output 0 is f32 [3, 5] but inference gave f32 [2, 5]";
  try {
    apply1("test_disagrees_with_inference", {Var(Tensor::zeros({2, 5}))});
    ADD_FAILURE() << "eager mode let the wrong shape through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  Graph graph;
  const Var in = Var::symbolic(&graph, graph.add_input("x", ValueInfo{DType::f32, {2, 5}}));
  const Var y = apply1("test_disagrees_with_inference", {in});
  try {
    execute(graph, {Tensor::zeros({2, 5})}, {}, {y.id()});
    ADD_FAILURE() << "the executor let the wrong shape through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(OpDefs, KernelOpsTakeStridedAndBroadcastInputsAsTheyCome) {
  const Tensor x = test::random_tensor({4, 3}, 9), row = test::random_tensor({4}, 10);
  const Tensor xt = x.transpose(0, 1);  // [3, 4], not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  // The strided loop of gelu is scalar and the dense one vectorised, hence a tolerance there.
  EXPECT_EQ(test::values(gelu(Var(xt)).tensor()), test::values(kernels::gelu(xt)));
  EXPECT_LE(test::scaled_max_error(gelu(Var(xt)).tensor(), kernels::gelu(xt.contiguous())), 1e-6);
  EXPECT_EQ(test::values((Var(xt) + Var(row)).tensor()), test::values(kernels::add(xt.contiguous(), row)));
  EXPECT_EQ(test::values(relu_backward(Var(xt), Var(xt), 0.5).tensor()),
            test::values(kernels::relu_backward(xt.contiguous(), xt.contiguous(), 0.5)));
  const Tensor square = test::random_tensor({2, 3, 3}, 11).transpose(1, 2);
  EXPECT_EQ(test::values(causal_mask(Var(square)).tensor()),
            test::values(causal_mask(Var(square.contiguous())).tensor()));
  const Tensor y = kernels::max(xt, {1}, true), dy = test::random_tensor({3, 1}, 12);
  EXPECT_EQ(test::values(apply1("max_backward", {Var(dy), Var(xt), Var(y)}).tensor()),
            test::values(kernels::max_backward(dy, xt.contiguous(), y)));
}

// The elementwise ops are listed once (kernels/elementwise.hpp); each is a kernel, a chain step and
// a graph op of the same name, and so is each unary function's backward.
TEST(OpDefs, EveryListedElementwiseOpIsAKernelAChainStepAndAGraphOp) {
  std::vector<std::string> names;
#define TROUPE_NAME(op) names.push_back(#op);
#define TROUPE_BACKWARD_NAME(op) names.push_back(#op "_backward");
  TROUPE_BINARY_OPS(TROUPE_NAME)
  TROUPE_UNARY_OPS(TROUPE_NAME)
  TROUPE_UNARY_OPS(TROUPE_BACKWARD_NAME)
#undef TROUPE_NAME
#undef TROUPE_BACKWARD_NAME
  for (const std::string& name : names) {
    EXPECT_NO_THROW(OpRegistry::instance().get(name)) << name;
    for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
      EXPECT_TRUE(KernelRegistry::instance().contains(name, DeviceKind::cpu, dtype)) << name << " " << dtype_name(dtype);
    const std::optional<kernels::ChainOp> step = kernels::chain_op(name);
    ASSERT_TRUE(step.has_value()) << name;
    EXPECT_EQ(kernels::to_string(*step), name);
  }
  EXPECT_STREQ(kernels::to_string(kernels::UnaryOp::rsqrt), "rsqrt");
  EXPECT_STREQ(kernels::to_string(kernels::BinaryOp::div), "div");
  EXPECT_EQ(kernels::chain_op_arity(kernels::ChainOp::sub), 2);
  EXPECT_EQ(kernels::chain_op_arity(kernels::ChainOp::tanh), 1);
  EXPECT_TRUE(kernels::chain_op_has_value(kernels::ChainOp::relu_backward));
  EXPECT_FALSE(kernels::chain_op_has_value(kernels::ChainOp::gelu_backward));
}
