// The elementwise-chain front end: the op table, the steps' encoding as attributes, checks, dispatch.
#include "troupe/kernels/elementwise_chain.hpp"

#include "float_checks.hpp"

namespace troupe::kernels {

namespace {

// What the chain knows of each op, in ChainOp's order.
struct ChainOpInfo {
  const char* name;
  int arity;       // operands it reads
  bool has_value;  // reads ChainStep::value
};
#define TROUPE_BINARY_INFO(op) {#op, 2, false},
#define TROUPE_UNARY_INFO(op) {#op, 1, false},
#define TROUPE_BACKWARD_INFO(op) {#op "_backward", 2, false},
constexpr ChainOpInfo kOps[] = {
    TROUPE_BINARY_OPS(TROUPE_BINARY_INFO) {"add_scalar", 1, true}, {"mul_scalar", 1, true},
    TROUPE_UNARY_OPS(TROUPE_UNARY_INFO)
    {"relu_backward", 2, true}, TROUPE_SMOOTH_UNARY_OPS(TROUPE_BACKWARD_INFO)
    {"bias_gelu", 2, false}};
#undef TROUPE_BINARY_INFO
#undef TROUPE_UNARY_INFO
#undef TROUPE_BACKWARD_INFO
constexpr std::size_t kOpCount = sizeof(kOps) / sizeof(kOps[0]);
static_assert(kOpCount == static_cast<std::size_t>(ChainOp::bias_gelu) + 1, "one entry per chain op");

// Checks one program; `where` names the caller in the error.
void check_steps(const std::vector<ChainStep>& steps, std::size_t inputs, const char* where) {
  TROUPE_CHECK(inputs >= 1 && inputs <= kMaxChainInputs, invalid_argument, where, ": a chain takes 1 to ",
               kMaxChainInputs, " inputs, got ", inputs);
  TROUPE_CHECK(!steps.empty() && steps.size() <= kMaxChainSteps, invalid_argument, where, ": a chain has 1 to ",
               kMaxChainSteps, " steps, got ", steps.size());
  std::vector<bool> read(inputs + steps.size(), false);
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const ChainStep& s = steps[j];
    const auto code = static_cast<std::int64_t>(s.op);
    TROUPE_CHECK(code >= 0 && code < static_cast<std::int64_t>(kOpCount), invalid_argument, where, ": step ", j,
                 " has unknown op code ", code);
    const int limit = static_cast<int>(inputs + j);  // inputs and the steps before j
    const bool two = chain_op_arity(s.op) == 2;
    TROUPE_CHECK(s.a >= 0 && s.a < limit && (two ? s.b >= 0 && s.b < limit : s.b == -1), invalid_argument, where,
                 ": step ", j, " (", to_string(s.op), ") reads operands ", s.a, ", ", s.b, "; it needs ", two ? 2 : 1,
                 " among the ", inputs, " inputs and the ", j, " steps before it");
    read[static_cast<std::size_t>(s.a)] = true;
    if (two) read[static_cast<std::size_t>(s.b)] = true;
  }
  // Every input and step feeds the last step, so its shape is all inputs' broadcast shape.
  for (std::size_t k = 0; k + 1 < read.size(); ++k)
    TROUPE_CHECK(read[k], invalid_argument, where, ": ", k < inputs ? "input " : "step ", k < inputs ? k : k - inputs,
                 " is read by no later step");
}

}  // namespace

const char* to_string(ChainOp op) {
  const auto code = static_cast<std::size_t>(op);
  return code < kOpCount ? kOps[code].name : "?";
}

std::optional<ChainOp> chain_op(const std::string& name) {
  for (std::size_t k = 0; k < kOpCount; ++k)
    if (name == kOps[k].name) return static_cast<ChainOp>(k);
  return std::nullopt;
}

int chain_op_arity(ChainOp op) { return kOps[static_cast<std::size_t>(op)].arity; }

bool chain_op_has_value(ChainOp op) { return kOps[static_cast<std::size_t>(op)].has_value; }

Attrs chain_attrs(const std::vector<ChainStep>& steps) {
  std::vector<std::int64_t> ops, args;
  Attrs attrs;
  for (std::size_t j = 0; j < steps.size(); ++j) {
    ops.push_back(static_cast<std::int64_t>(steps[j].op));
    args.push_back(steps[j].a);
    args.push_back(steps[j].b);
    if (chain_op_has_value(steps[j].op)) attrs.set("value" + std::to_string(j), steps[j].value);
  }
  return attrs.set("ops", ops).set("args", args);
}

std::vector<ChainStep> chain_steps(const Attrs& attrs, std::size_t inputs) {
  const std::vector<std::int64_t>& ops = attrs.get_ints("ops");
  const std::vector<std::int64_t>& args = attrs.get_ints("args");
  TROUPE_CHECK(args.size() == 2 * ops.size(), invalid_argument, "elementwise_chain: ", ops.size(), " ops need ",
               2 * ops.size(), " args, got ", args.size());
  std::vector<ChainStep> steps;
  for (std::size_t j = 0; j < ops.size(); ++j) {
    const ChainStep s{static_cast<ChainOp>(ops[j]), static_cast<int>(args[2 * j]), static_cast<int>(args[2 * j + 1]), 0.0};
    steps.push_back(s);
  }
  check_steps(steps, inputs, "elementwise_chain");
  for (std::size_t j = 0; j < steps.size(); ++j)
    if (chain_op_has_value(steps[j].op)) steps[j].value = attrs.get_double("value" + std::to_string(j));
  return steps;
}

Tensor elementwise_chain(const std::vector<Tensor>& inputs, const std::vector<ChainStep>& steps) {
  const char* op = "elementwise_chain";
  check_steps(steps, inputs.size(), op);
  Shape shape = inputs[0].shape();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string role = "input " + std::to_string(k);
    check_float_like(op, role.c_str(), inputs[k], "input 0", inputs[0]);
    shape = broadcast_shapes(shape, inputs[k].shape(), op);
  }
  std::vector<Tensor> out{Tensor::empty(shape, inputs[0].dtype(), inputs[0].device())};
  dispatch(op, inputs, out, chain_attrs(steps));
  return out[0];
}

}  // namespace troupe::kernels
