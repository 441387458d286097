// The start of a step: its inputs split into micro-batches, the parameters snapshotted (and cast
// once for the step where the graph casts them), the
// bucket buffers allocated (program_actor.hpp).
#include <algorithm>

#include "program_actor.hpp"
#include "troupe/graph/executor.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/kernels/error.hpp"
#include "zero_shard.hpp"

namespace troupe::actors {

namespace {

// The rows of each micro-batch when `rows` are split into `wanted` parts: sizes differ by at most
// one, larger first (torch.tensor_split's sizes), and no part is empty, so a batch of fewer rows
// than `wanted` gets one row per micro-batch (as torch.chunk gives fewer chunks).
std::vector<std::int64_t> micro_batch_rows(std::int64_t rows, int wanted) {
  const std::int64_t count = std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, rows));
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(count), rows / count);
  for (std::int64_t k = 0; k < rows % count; ++k) ++sizes[static_cast<std::size_t>(k)];
  return sizes;
}

// The batch's rows: dim 0 of every input, which must agree, and be dynamic in the signature, when
// the batch is split.
std::int64_t batch_rows(const graph::Graph& g, const std::vector<Tensor>& inputs, int wanted) {
  if (wanted == 1 || inputs.empty()) return 0;  // nothing to split
  auto name = [&](std::size_t k) { return "input '" + g.value(g.inputs()[k]).name + "'"; };
  for (std::size_t k = 0; k < inputs.size(); ++k)
    TROUPE_CHECK(inputs[k].dim() > 0, shape_mismatch, name(k), " is 0-d, so it has no dim 0 to split into ", wanted,
                 " micro-batches; give every input a batch dim or use 1 micro-batch");
  const std::int64_t rows = inputs[0].shape()[0];
  for (std::size_t k = 1; k < inputs.size(); ++k)
    TROUPE_CHECK(inputs[k].shape()[0] == rows, shape_mismatch, name(k), " of shape ", shape_str(inputs[k].shape()), " has ",
                 inputs[k].shape()[0], " rows but ", name(0), " has ", rows,
                 "; micro-batches split every input along dim 0, so all inputs need the same batch size (or use 1 micro-batch)");
  if (rows > 1)
    for (std::size_t k = 0; k < inputs.size(); ++k)
      TROUPE_CHECK(!g.value(g.inputs()[k]).info.shape[0].is_static(), shape_mismatch, name(k),
                   " has a fixed dim 0 in the signature, so it cannot be split into ", wanted,
                   " micro-batches; declare dim 0 dynamic (-1 or a named symbol) or use 1 micro-batch");
  return rows;
}

// A view that repeats elements along some dim (a stride of 0 over more than one element).
bool is_broadcast(const Tensor& t) {
  for (std::size_t d = 0; d < t.shape().size(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0) return true;
  return false;
}

// The output of step node `s` (a cast), from the step's parameters and earlier step values,
// written over `kept`, the last step's, when it has the shape: no allocation after the first step.
Tensor step_value(const graph::Graph& g, const StepNode& s, const std::vector<Tensor>& parameters,
                  const graph::SymBindings& bindings, Tensor& kept) {
  const graph::Node& n = g.node(s.node);
  const graph::Value& out = g.value(n.outputs[0]);
  std::vector<Tensor> in;
  for (int k : s.inputs) in.push_back(parameters[static_cast<std::size_t>(k)]);
  const std::vector<Shape> shapes{graph::bind(out.info.shape, bindings)};
  const std::vector<DType> dtypes{out.info.dtype};
  try {
    if (kept.defined() && kept.shape() == shapes[0] && kept.dtype() == dtypes[0]) {
      kept.copy_from(in[0]);  // a cast is a converting copy
      return kept;
    }
    return kept = graph::OpRegistry::instance().get(n.op).run(in, graph::ComputeContext{n.attrs, shapes, dtypes, n.label})[0];
  } catch (const Error& e) {
    throw Error(e.kind(), n.op + " %" + std::to_string(out.id) + " (computed once per step) failed: " + e.message());
  }
}

}  // namespace

StepContextPtr make_step_context(const ProgramSetup& setup, std::uint64_t step, const std::vector<Tensor>& inputs,
                                 const kernels::RandomPosition& random, std::vector<Tensor>& bucket_buffers,
                                 std::vector<Tensor>& step_values) {
  const graph::Graph& g = setup.fn->graph();
  const graph::SymBindings whole = graph::bind_inputs(g, inputs);  // whole-batch check first: its errors name the user's shapes
  auto ctx = std::make_shared<StepContext>();
  ctx->step = step;
  const std::int64_t rows = batch_rows(g, inputs, setup.micro_batches);
  const std::vector<std::int64_t> sizes = micro_batch_rows(rows, setup.micro_batches);
  ctx->micro_batches = static_cast<int>(sizes.size());
  if (sizes.size() == 1) {
    ctx->inputs = {inputs};
    ctx->bindings = {whole};
    ctx->weights = {1.0};
    ctx->random = {random};
  } else {
    std::int64_t begin = 0;
    for (std::int64_t size : sizes) {
      kernels::RandomPosition at = random;
      at.first_row += begin;
      ctx->random.push_back(at);
      std::vector<Tensor> part;
      // A broadcast view (a pipeline stage's stand-in for a value it receives, which gives only
      // the shape) stays a view: copying it would only make zeros.
      for (const Tensor& t : inputs) {
        const Tensor rows = t.slice(0, begin, begin + size);
        part.push_back(is_broadcast(rows) ? rows : rows.contiguous());
      }
      ctx->bindings.push_back(graph::bind_inputs(g, part));
      ctx->inputs.push_back(std::move(part));
      ctx->weights.push_back(static_cast<double>(size) / static_cast<double>(rows));
      begin += size;
    }
  }
  for (const graph::Var& p : setup.fn->parameters()) ctx->parameters.push_back(p.tensor());
  // (ZeRO-1: the program started the step once the last all-gather wrote the parameters the casts read.)
  step_values.resize(setup.plan->step_nodes.size());
  for (std::size_t k = 0; k < step_values.size(); ++k)
    ctx->parameters.push_back(step_value(g, setup.plan->step_nodes[k], ctx->parameters, whole, step_values[k]));
  if (setup.comm) {
    // The program's buffers, made by its first step (or after it gave the last ones away).
    const BucketLayout& plan = *setup.peers->gradients.buckets;
    bucket_buffers.resize(plan.numel.size());
    for (std::size_t b = 0; b < plan.numel.size(); ++b) {
      Tensor& buffer = bucket_buffers[b];
      if (!buffer.defined()) {
        buffer = Tensor::empty({plan.numel[b]});
        const BucketEntry& last = plan.buckets[b].back();
        const std::int64_t used = last.offset + shape_numel(last.shape);
        if (used < plan.numel[b])  // ZeRO-1's padding: zeros, never written
          buffer.slice(0, used, plan.numel[b]).copy_from(Tensor::zeros({plan.numel[b] - used}));
      }
      ctx->buckets.push_back(buffer);
    }
  }
  if (setup.memory) ctx->memory = setup.memory->begin(*ctx);
  return ctx;
}

}  // namespace troupe::actors
