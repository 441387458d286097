#include <algorithm>
#include <sstream>

#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe::graph {

bool OpDef::differentiable(std::size_t i) const {
  return std::find(no_grad_inputs.begin(), no_grad_inputs.end(), static_cast<int>(i)) == no_grad_inputs.end();
}

namespace {

// A kernel op's outputs, allocated from the inferred shapes and dtypes on the inputs' device.
std::vector<Tensor> allocate_outputs(const char* op, const std::vector<Tensor>& inputs, const ComputeContext& ctx) {
  const auto first = std::find_if(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined(); });
  TROUPE_CHECK(first != inputs.end(), invalid_argument, op, ": called without a defined input tensor");
  std::vector<Tensor> outputs;
  outputs.reserve(ctx.output_shapes.size());
  for (std::size_t i = 0; i < ctx.output_shapes.size(); ++i)
    outputs.push_back(Tensor::empty(ctx.output_shapes[i], ctx.output_dtypes[i], first->device()));
  return outputs;
}

// Checks a node's computed outputs against its inferred shapes and dtypes.
void check_outputs(const char* name, const std::vector<Tensor>& outputs, const std::vector<Shape>& shapes,
                   const std::vector<DType>& dtypes) {
  // A compute function that disagrees with its op's inference is a bug in the op; caught here, it
  // cannot reach the next op as a wrongly shaped tensor.
  TROUPE_CHECK(outputs.size() == shapes.size(), runtime, name, ": computed ", outputs.size(),
               " outputs, inference gave ", shapes.size());
  for (std::size_t i = 0; i < outputs.size(); ++i)
    TROUPE_CHECK(outputs[i].shape() == shapes[i] && outputs[i].dtype() == dtypes[i], runtime,
                 name, ": output ", i, " is ", dtype_name(outputs[i].dtype()), " ", shape_str(outputs[i].shape()),
                 " but inference gave ", dtype_name(dtypes[i]), " ", shape_str(shapes[i]));
}

}  // namespace

std::vector<Tensor> OpDef::run(const std::vector<Tensor>& inputs, const ComputeContext& ctx) const {
  if (collective) {
    const CollectiveCall call = start(inputs, ctx);
    std::exception_ptr failure;
    try {
      run_on(*call.group, call.on_wire);
    } catch (...) {
      failure = std::current_exception();
    }
    return call.finish(failure);
  }
  std::vector<Tensor> outputs;
  if (compute) {
    outputs = compute(inputs, ctx);
  } else {
    outputs = allocate_outputs(name, inputs, ctx);
    dispatch(kernel, inputs, outputs, ctx.attrs);
  }
  check_outputs(name, outputs, ctx.output_shapes, ctx.output_dtypes);
  return outputs;
}

CollectiveCall OpDef::start(const std::vector<Tensor>& inputs, const ComputeContext& ctx) const {
  TROUPE_CHECK(collective, invalid_argument, name, ": is not a collective op");
  CollectiveCall call = collective(inputs, ctx);
  // The context's references do not outlive this call: finish checks against copies.
  call.finish = [name = name, finish = std::move(call.finish), shapes = ctx.output_shapes,
                 dtypes = ctx.output_dtypes](std::exception_ptr failure) {
    std::vector<Tensor> outputs = finish(failure);
    check_outputs(name, outputs, shapes, dtypes);
    return outputs;
  };
  return call;
}

std::vector<Tensor> OpDef::run_in_place(const std::vector<Tensor>& inputs, const ComputeContext& ctx,
                                        std::size_t input) const {
  TROUPE_CHECK(in_place && kernel && ctx.output_shapes.size() == 1 && input < inputs.size(), invalid_argument, name,
               ": cannot run in place over input ", input);
  const Tensor& target = inputs[input];
  TROUPE_CHECK(target.is_contiguous() && target.shape() == ctx.output_shapes[0] && target.dtype() == ctx.output_dtypes[0],
               invalid_argument, name, ": input ", input, " ", target.str(), " cannot hold output ",
               dtype_name(ctx.output_dtypes[0]), shape_str(ctx.output_shapes[0]));
  std::vector<Tensor> outputs{target};
  dispatch(kernel, inputs, outputs, ctx.attrs);
  check_outputs(name, outputs, ctx.output_shapes, ctx.output_dtypes);
  return outputs;
}

bool OpDef::counts_arithmetic() const { return cost != nullptr && cost != moves_only; }

double moves_only(const CostContext&) { return 0; }

double elements_touched(const CostContext& ctx) {
  double touched = static_cast<double>(shape_numel(ctx.outputs.at(0)));
  for (const Shape& in : ctx.inputs) touched = std::max(touched, static_cast<double>(shape_numel(in)));
  return touched;
}

double op_cost(const Graph& g, const Node& node, const SymBindings& bindings) {
  std::vector<Shape> inputs, outputs;
  for (ValueId v : node.inputs) inputs.push_back(bind(g.value(v).info.shape, bindings));
  for (ValueId v : node.outputs) outputs.push_back(bind(g.value(v).info.shape, bindings));
  const OpDef& def = OpRegistry::instance().get(node.op);
  const CostContext ctx{inputs, outputs, node.attrs};
  return def.cost ? def.cost(ctx) : elements_touched(ctx);
}

GradFn missing_gradient(const std::string& op) {
  return [op](const GradContext&) -> std::vector<Var> {
    fail(ErrorKind::unsupported, "op '", op, "' has no gradient rule, but a gradient must flow through it",
         " (higher-order gradients are not supported); wrap it in stop_gradient() or give it a custom gradient");
  };
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  TROUPE_CHECK(def.name && def.infer, invalid_argument, "an op definition needs .name and .infer");
  const std::string name = def.name;
  TROUPE_CHECK((def.kernel != nullptr) + (def.compute != nullptr) + (def.collective != nullptr) == 1, invalid_argument,
               "op '", name, "' needs exactly one of .kernel, .compute and .collective");
  // A kernel name is a dispatch key, so a misspelt one fails here, at load time, not in the first step.
  TROUPE_CHECK(!def.kernel || KernelRegistry::instance().contains(def.kernel, DeviceKind::cpu, DType::f32),
               invalid_argument, "op '", name, "' runs kernel '", def.kernel, "', which has no CPU f32 kernel");
  TROUPE_CHECK(!def.in_place || def.kernel, invalid_argument, "op '", name,
               "' is marked in_place, which only kernel ops (written elementwise) may be");
  TROUPE_CHECK(def.in_place_input < 0 || def.in_place, invalid_argument, "op '", name,
               "' names an in_place_input but is not in_place");
  TROUPE_CHECK(ops_.emplace(name, std::move(def)).second, invalid_argument, "op '", name, "' is defined twice");
}

const OpDef& OpRegistry::get(const std::string& op) const {
  auto it = ops_.find(op);
  if (it != ops_.end()) return it->second;
  std::ostringstream known;
  for (const auto& [name, def] : ops_) known << ' ' << name;
  fail(ErrorKind::invalid_argument, "unknown op '", op, "'; defined ops:", known.str());
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : ops_) out.push_back(name);
  return out;
}

void OpRegistry::add_gradient(const std::string& name, GradFn fn) {
  TROUPE_CHECK(fn != nullptr, invalid_argument, "gradient '", name, "' is empty");
  TROUPE_CHECK(gradients_.emplace(name, std::move(fn)).second, invalid_argument, "gradient '", name,
               "' is registered twice");
}

const GradFn& OpRegistry::gradient(const std::string& name) const {
  auto it = gradients_.find(name);
  if (it != gradients_.end()) return it->second;
  std::ostringstream known;
  for (const auto& [n, fn] : gradients_) known << ' ' << n;
  fail(ErrorKind::invalid_argument, "unknown gradient rule '", name, "'; registered:", known.str());
}

}  // namespace troupe::graph
