// Sharding a graph over a device mesh (graph/sharding.hpp): the collectives between placements and
// their bytes; Megatron's MLP on a tensor-parallel axis needs one all-reduce, where Megatron has it,
// and Megatron's Transformer block (qkv rows grouped by head) two each way, nothing else;
// a data-parallel training graph needs exactly its gradients' all-reduce; heads split through
// reshape, permute and softmax stay local; a 2-D mesh places each axis; bad placements are refused;
// vocab-parallel tables run their lookup and loss expanded, without gathering the logits.
// Every 1-D plan is also run: each device runs each node on its own slices under the chosen
// signature, transitions move the slices, and the result equals the unsharded run.
#include <gtest/gtest.h>

#include "expect_error.hpp"
#include "troupe/plan/propagation.hpp"
#include "kernels/reference.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/op_def.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/sharding.hpp"
#include "troupe/graph/spmd.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"

using namespace troupe;
using namespace troupe::graph;
using troupe::plan::propagate_sharding;

namespace {

using Kind = Placement::Kind;
const Placement B = Placement::broadcast(), P = Placement::partial_sum();
Placement S(int d, int blocks = 1) { return Placement::split(d, blocks); }

// One value as each of the devices holds it.
using Shards = std::vector<Tensor>;

// `full` as the n devices of a 1-D mesh hold it under `p` (graph::shard_of: a partial sum all on
// device 0, zeros elsewhere; a split in blocks, slice r of every block on device r).
Shards place(const Tensor& full, const Placement& p, int n) {
  const Mesh mesh{{{"x", n}}};
  Shards s;
  for (int r = 0; r < n; ++r) s.push_back(shard_of(full, {p}, mesh, {r}));
  return s;
}

// The value the devices' shards make up under `p` (graph::assemble).
Tensor whole(const Shards& s, const Placement& p) { return assemble(s, {p}, Mesh{{{"x", static_cast<int>(s.size())}}}); }

// Runs `g` as `plan` places it on a 1-D mesh: every node on every device on its own shards, under
// the node's chosen signature; a transition takes the whole value and places it anew, which is what
// its collective computes. `values` holds the inputs and parameters. Returns the outputs, whole.
std::vector<Tensor> run_sharded(const Graph& g, const GraphPlacement& plan, const std::map<ValueId, Tensor>& values) {
  const int n = plan.mesh.axes.at(0).second;
  std::map<ValueId, Shards> held;
  for (const Value& v : g.values()) {
    if (v.kind == ValueKind::op_output) continue;
    held[v.id] = place(v.kind == ValueKind::constant ? v.constant : values.at(v.id), plan.placements.at(v.id)[0], n);
  }
  for (const Node& node : g.nodes()) {
    const OpDef& def = OpRegistry::instance().get(node.op);
    const ShardSignature& sig = plan.signatures.at(node.id).at(0);
    if (sig.expand) ADD_FAILURE() << node.op << " runs expanded: its collectives run in shard_step's graphs (test_tensor_parallel)";
    std::vector<Shards> in;
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      in.push_back(place(whole(held.at(node.inputs[i]), plan.placements.at(node.inputs[i])[0]), sig.inputs[i], n));
    SymShape target = node.target;  // a reshape's target, as each device's slice has it (-1 is inferred)
    if (!target.empty() && sig.outputs[0].kind == Kind::split) {  // (a reshape's output is never blocked)
      SymDim& split = target[static_cast<std::size_t>(sig.outputs[0].dim)];
      if (split.size() > 0) split = split.size() / n;
    }
    Attrs attrs = node.attrs;  // a split's sizes, as each device's slice has them
    if (node.op == "split" && sig.inputs[0].kind == Kind::split) {
      const auto rank = static_cast<std::int64_t>(g.value(node.inputs[0]).info.shape.size());
      if ((attrs.get_int("axis") + rank) % rank == sig.inputs[0].dim) {
        std::vector<std::int64_t> sizes = attrs.get_ints("sizes");
        for (std::int64_t& size : sizes) size /= n;
        attrs.set("sizes", sizes);
      }
    }
    for (int r = 0; r < n; ++r) {
      std::vector<Tensor> local;
      std::vector<ValueInfo> infos;
      for (const Shards& s : in) {
        local.push_back(s[static_cast<std::size_t>(r)]);
        infos.push_back({local.back().dtype(), to_sym(local.back().shape())});
      }
      const std::vector<ValueInfo> out_infos = def.infer(InferContext{node.op, infos, attrs, target});
      std::vector<Shape> shapes;
      std::vector<DType> dtypes;
      for (const ValueInfo& o : out_infos) {
        shapes.push_back(to_static(o.shape, node.op));
        dtypes.push_back(o.dtype);
      }
      std::vector<Tensor> out = def.run(local, ComputeContext{attrs, shapes, dtypes, node.label});
      if (sig.mean_of_split)
        for (Tensor& t : out) t = (Var(t) * (1.0 / n)).tensor();
      for (std::size_t o = 0; o < out.size(); ++o) {
        Shards& s = held[node.outputs[o]];
        s.resize(static_cast<std::size_t>(n));
        s[static_cast<std::size_t>(r)] = out[o];
      }
    }
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {  // a pinned output moves where it is made
      const Placement& pinned = plan.placements.at(node.outputs[o])[0];
      if (pinned != sig.outputs[o]) held[node.outputs[o]] = place(whole(held[node.outputs[o]], sig.outputs[o]), pinned, n);
    }
  }
  std::vector<Tensor> outputs;
  for (ValueId v : g.outputs()) outputs.push_back(whole(held.at(v), plan.placements.at(v)[0]));
  return outputs;
}

// The graph's value called `name` (a parameter or an input).
ValueId named(const Graph& g, const std::string& name) {
  for (const Value& v : g.values())
    if (v.name == name) return v.id;
  ADD_FAILURE() << "no value " << name;
  return -1;
}

// The transitions that communicate (not local), by collective.
std::vector<Transition> communicating(const GraphPlacement& plan) {
  std::vector<Transition> out;
  for (const Transition& t : plan.transitions)
    if (t.collective != Collective::local) out.push_back(t);
  return out;
}

// Megatron's MLP: fc (column-parallel) -> gelu -> proj (row-parallel).
struct Mlp : Module {
  explicit Mlp(Generator& gen)
      : fc(register_module("fc", std::make_shared<Linear>(8, 16, gen))),
        proj(register_module("proj", std::make_shared<Linear>(16, 8, gen))) {}
  Var operator()(const Var& x) { return (*proj)(gelu((*fc)(x))); }
  std::shared_ptr<Linear> fc, proj;
};

// The values of a traced function's inputs (in order) and parameters.
std::map<ValueId, Tensor> values_of(const TracedFunction& f, const std::vector<Tensor>& inputs) {
  std::map<ValueId, Tensor> v;
  for (std::size_t i = 0; i < inputs.size(); ++i) v[f.graph().inputs()[i]] = inputs[i];
  for (std::size_t p = 0; p < f.parameters().size(); ++p) v[f.graph().parameters()[p]] = f.parameters()[p].tensor();
  return v;
}

}  // namespace

TEST(Sharding, CollectivesBetweenPlacementsAndTheirBytes) {
  EXPECT_EQ(collective_between(P, B), Collective::all_reduce);
  EXPECT_EQ(collective_between(P, S(1)), Collective::reduce_scatter);
  EXPECT_EQ(collective_between(S(0), B), Collective::all_gather);
  EXPECT_EQ(collective_between(S(0), S(1)), Collective::all_to_all);
  EXPECT_EQ(collective_between(B, S(0)), Collective::local);
  EXPECT_EQ(collective_between(B, P), Collective::local);
  EXPECT_EQ(collective_between(S(1), S(1)), Collective::none);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_reduce, 1000, 4), 1500);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_gather, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_to_all, 1000, 4), 187.5);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::local, 1000, 4), 0);
  EXPECT_EQ(placement_str({S(0), B, P, S(1, 3)}), "(S(0), B, P, S(1)x3)");
  EXPECT_EQ(collective_between(S(0, 3), S(0)), Collective::all_to_all);  // the same dim, another layout
  EXPECT_EQ((Mesh{{{"dp", 2}, {"tp", 4}}}).str(), "dp=2 x tp=4");
}

TEST(Sharding, MegatronMlpNeedsOneAllReduceAndComputesTheSame) {
  Generator gen(1);
  Mlp mlp(gen);
  NoGradGuard no_grad;
  const TracedFunction f = trace([&](const std::vector<Var>& in) { return std::vector<Var>{mlp(in[0])}; }, {{"x", {4, 8}}});
  const Graph& g = f.graph();
  const Mesh tp{{{"tp", 2}}};
  const GraphPlacement plan = propagate_sharding(
      g, tp, {{named(g, "fc.weight"), {S(0)}}, {named(g, "fc.bias"), {S(0)}}, {named(g, "proj.weight"), {S(1)}}},
      {{g.outputs()[0], {B}}}, {});
  // The hidden activations stay split by columns; the row-parallel product's partial sums meet one all-reduce.
  for (const Node& node : g.nodes())
    if (node.op == "gelu") {
      EXPECT_EQ(plan.placements.at(node.outputs[0])[0], S(1));
    }
  const std::vector<Transition> comm = communicating(plan);
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_EQ(comm[0].collective, Collective::all_reduce);
  EXPECT_DOUBLE_EQ(comm[0].bytes, 4 * 8 * 4);  // 2 (n-1)/n of [4, 8] f32
  EXPECT_DOUBLE_EQ(plan.total_bytes(), 4 * 8 * 4);

  const Tensor x = test::random_tensor({4, 8}, 2);
  const Tensor expected = f({x})[0];
  EXPECT_LE(test::scaled_max_error(run_sharded(g, plan, values_of(f, {x}))[0], expected), 1e-6);
  // Any placement is exact, not only the cheap one: fc split by rows makes partial sums before gelu.
  const GraphPlacement rows = propagate_sharding(g, tp, {{named(g, "fc.weight"), {S(1)}}, {named(g, "x"), {S(1)}}},
                                               {{g.outputs()[0], {B}}}, {});
  EXPECT_EQ(communicating(rows).at(0).collective, Collective::reduce_scatter);  // the partial sums, for gelu
  EXPECT_LE(test::scaled_max_error(run_sharded(g, rows, values_of(f, {x}))[0], expected), 1e-6);
}

TEST(Sharding, DataParallelTrainingAllReducesTheGradientsOnly) {
  Generator gen(3);
  Linear layer(8, 6, gen, false);
  const TracedFunction f = trace(
                               [&](const std::vector<Var>& in) {
                                 const Var y = layer(in[0]);
                                 return std::vector<Var>{sum(y * y, {}, false)};
                               },
                               {{"x", {4, 8}}})
                               .with_gradients();
  const Graph& g = f.graph();
  ASSERT_EQ(g.outputs().size(), 2u);  // the loss, then the weight's gradient
  const GraphPlacement plan = propagate_sharding(g, Mesh{{{"dp", 2}}}, {{named(g, "x"), {S(0)}}},
                                               {{g.outputs()[0], {B}}, {g.outputs()[1], {B}}}, {});
  const std::vector<Transition> comm = communicating(plan);
  ASSERT_EQ(comm.size(), 2u) << "the loss and the gradient, nothing else";
  for (const Transition& t : comm) {
    EXPECT_EQ(t.collective, Collective::all_reduce);
    EXPECT_EQ(t.consumer, -1);  // at the outputs: the rest of the step stays local
  }
  EXPECT_DOUBLE_EQ(plan.total_bytes(), 4 + 6 * 8 * 4);
  const Tensor x = test::random_tensor({4, 8}, 4);
  const Tensor loss = f({x})[0], gradient = layer.weight.grad().clone();  // one call: grad() holds its gradient
  const std::vector<Tensor> got = run_sharded(g, plan, values_of(f, {x}));
  EXPECT_LE(test::scaled_max_error(got[0], loss), 1e-6);
  EXPECT_LE(test::scaled_max_error(got[1], gradient), 1e-6);
}

TEST(Sharding, HeadsSplitThroughReshapePermuteAndSoftmaxStayLocal) {
  NoGradGuard no_grad;
  // [batch 2, time 4, 4 heads x 3] -> per-head softmax over time -> back, summed over time.
  const TracedFunction f = trace(
      [](const std::vector<Var>& in) {
        const Var h = permute(reshape(in[0], {2, 4, 4, 3}), {0, 2, 1, 3});  // [2, heads, 4, 3]
        const Var p = softmax(permute(h, {0, 1, 3, 2}), -1);                // over time
        return std::vector<Var>{sum(reshape(permute(p, {0, 3, 1, 2}), {2, 4, 12}), {1}, false)};
      },
      {{"x", {2, 4, 12}}});
  const Graph& g = f.graph();
  const GraphPlacement plan = propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(2)}}}, {{g.outputs()[0], {S(1)}}}, {});
  EXPECT_TRUE(communicating(plan).empty());
  const Tensor x = test::random_tensor({2, 4, 12}, 5);
  EXPECT_LE(test::scaled_max_error(run_sharded(g, plan, values_of(f, {x}))[0], f({x})[0]), 1e-6);
  // Split by time instead, softmax over time needs the whole rows: an all-to-all or gather first.
  const GraphPlacement by_time = propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(1)}}}, {}, {});
  EXPECT_FALSE(communicating(by_time).empty());
  EXPECT_LE(test::scaled_max_error(run_sharded(g, by_time, values_of(f, {x}))[0], f({x})[0]), 1e-6);
}

TEST(Sharding, ATwoDimensionalMeshPlacesEachAxis) {
  Generator gen(6);
  Mlp mlp(gen);
  NoGradGuard no_grad;
  const TracedFunction f = trace([&](const std::vector<Var>& in) { return std::vector<Var>{mlp(in[0])}; },
                                 {{"x", {SymDim::symbol("batch"), 8}}});
  const Graph& g = f.graph();
  const GraphPlacement plan = propagate_sharding(
      g, Mesh{{{"dp", 2}, {"tp", 2}}},
      {{named(g, "x"), {S(0), B}}, {named(g, "fc.weight"), {B, S(0)}}, {named(g, "fc.bias"), {B, S(0)}},
       {named(g, "proj.weight"), {B, S(1)}}},
      {{g.outputs()[0], {S(0), B}}}, {{"batch", 8}});
  for (const Node& node : g.nodes())
    if (node.op == "gelu") {
      EXPECT_EQ(placement_str(plan.placements.at(node.outputs[0])), "(S(0), S(1))");
    }
  const std::vector<Transition> comm = communicating(plan);
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_EQ(comm[0].mesh_axis, 1);  // the tensor-parallel all-reduce, of each data-parallel half
  EXPECT_DOUBLE_EQ(comm[0].bytes, 8 * 8 * 4 / 2);  // 2 (n-1)/n of each dp half of [8, 8] f32
}

TEST(Sharding, PlacementsThatDoNotFitAreRefused) {
  NoGradGuard no_grad;
  const TracedFunction f = trace([](const std::vector<Var>& in) { return std::vector<Var>{gelu(in[0])}; }, {{"x", {3, 8}}});
  const Graph& g = f.graph();
  test::expect_error_mentions([&] { propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(0)}}}, {}, {}); },
               {"'x'", "[3, 8]", "(S(0))", "tp=2"});
  test::expect_error_mentions([&] { propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(2)}}}, {}, {}); }, {"'x'", "(S(2))"});
  test::expect_error_mentions([&] { propagate_sharding(g, Mesh{{{"dp", 2}, {"tp", 2}}}, {{named(g, "x"), {S(1)}}}, {}, {}); },
               {"one placement per mesh axis"});
  test::expect_error_mentions([&] { propagate_sharding(g, Mesh{}, {}, {}, {}); }, {"no axes"});
  // An uneven split is never chosen: the 3 rows stay whole on both devices.
  const GraphPlacement plan = propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(1)}}}, {{g.outputs()[0], {B}}}, {});
  EXPECT_EQ(plan.placements.at(g.nodes()[0].outputs[0])[0], S(1));
}

// Megatron's Transformer block on tp=2: qkv column-parallel with its rows grouped by head (so a
// device holds whole heads' q, k and v), the attention's output projection row-parallel, the MLP
// column- then row-parallel; LayerNorms and the biases after row-parallel products replicated.
// Forward needs one all-reduce per sublayer, and so does backward (Megatron's f and g); every
// gradient comes out placed like its parameter.
TEST(Sharding, MegatronGptBlockNeedsTwoAllReducesEachWay) {
  Generator gen(9);
  GPTBlock block(16, 2, gen);
  const std::map<std::string, Placement> megatron{
      {"attn.qkv.weight", S(0, 3)}, {"attn.qkv.bias", S(0, 3)}, {"attn.proj.weight", S(1)},
      {"mlp.fc.weight", S(0)},      {"mlp.fc.bias", S(0)},      {"mlp.proj.weight", S(1)}};
  const Tensor x = test::random_tensor({2, 4, 16}, 10);
  const TracedFunction f = trace(
                               [&](const std::vector<Var>& in) {
                                 const Var y = block(in[0]);
                                 return std::vector<Var>{sum(y * y, {}, false)};
                               },
                               {{"x", {2, 4, 16}}})
                               .with_gradients();
  const Graph& g = f.graph();
  std::map<ValueId, NdPlacement> given, required{{g.outputs()[0], {B}}};
  for (const auto& [name, p] : megatron) given[named(g, name)] = {p};
  // Megatron's g and f: the row-parallel products' outputs, and the gradients of the column-parallel
  // products' inputs, are all-reduced where they are made.
  for (const Node& node : g.nodes())
    if (node.op == "matmul" && !node.backward &&
        (node.inputs[1] == named(g, "attn.proj.weight") || node.inputs[1] == named(g, "mlp.proj.weight")))
      given[node.outputs[0]] = {B};
    else if (node.op == "matmul" && node.backward &&
             (node.inputs[1] == named(g, "attn.qkv.weight") || node.inputs[1] == named(g, "mlp.fc.weight")))
      given[node.outputs[0]] = {B};
  for (std::size_t k = 0; k < f.gradient_parameters().size(); ++k) {
    const ValueId param = g.parameters()[f.gradient_parameters()[k]];
    required[g.outputs()[1 + k]] = given.count(param) ? given[param] : NdPlacement{B};
  }
  const GraphPlacement plan = propagate_sharding(g, Mesh{{{"tp", 2}}}, given, required, {});
  int forward = 0, backward = 0;
  for (const Transition& t : communicating(plan)) {
    EXPECT_EQ(t.collective, Collective::all_reduce) << "value " << t.value << " at node " << t.consumer;
    EXPECT_DOUBLE_EQ(t.bytes, 2 * 4 * 16 * 4) << "2 (n-1)/n of an activation [2, 4, 16] f32";
    (g.nodes()[static_cast<std::size_t>(g.value(t.value).producer)].backward ? backward : forward) += 1;
  }
  EXPECT_EQ(forward, 2);
  EXPECT_EQ(backward, 2);
  block.zero_grad();
  const Tensor loss = f({x})[0];
  const std::vector<Tensor> got = run_sharded(g, plan, values_of(f, {x}));
  EXPECT_LE(test::scaled_max_error(got[0], loss), 1e-5);
  for (std::size_t k = 0; k < f.gradient_parameters().size(); ++k)
    EXPECT_LE(test::scaled_max_error(got[1 + k], f.parameters()[f.gradient_parameters()[k]].grad()), 1e-5) << "gradient " << k;
}

// Token embeddings into a Transformer block.
struct TinyGpt : Module {
  explicit TinyGpt(Generator& gen)
      : emb(register_module("emb", std::make_shared<Embedding>(32, 16, gen))),
        block(register_module("block", std::make_shared<GPTBlock>(16, 2, gen))) {}
  Var operator()(const Var& ids) { return (*block)((*emb)(ids)); }
  std::shared_ptr<Embedding> emb;
  std::shared_ptr<GPTBlock> block;
};

// Whatever the inputs' and parameters' placements, the plan computes what the unsharded graph
// does: the training graph of token embeddings and a Transformer block (attention with its qkv
// split, layer norms, the MLP, and every gradient), with the batch, time or feature dim split and
// the weights split by rows or columns.
TEST(Sharding, AnyPlacementOfAGptBlockComputesTheSame) {
  Generator gen(7);
  TinyGpt model(gen);
  Tensor ids = Tensor::empty({2, 4}, DType::i64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int64_t>()[i] = (i * 7 + 3) % 32;
  const TracedFunction f = trace(
                               [&](const std::vector<Var>& in) {
                                 const Var y = model(in[0]);
                                 return std::vector<Var>{sum(y * y, {}, false)};
                               },
                               {{"ids", {2, 4}, DType::i64}})
                               .with_gradients();
  const Graph& g = f.graph();
  model.zero_grad();
  const Tensor loss = f({ids})[0];
  std::vector<Tensor> gradients;
  for (std::size_t k = 0; k < f.gradient_parameters().size(); ++k)
    gradients.push_back(f.parameters()[f.gradient_parameters()[k]].grad().clone());
  const std::vector<std::map<std::string, Placement>> layouts{
      {{"ids", S(0)}},
      {{"ids", S(1)}, {"block.attn.qkv.weight", S(0)}, {"block.mlp.fc.weight", S(1)}},
      {{"emb.weight", S(1)}, {"block.attn.proj.weight", S(1)}, {"block.mlp.fc.weight", S(0)},
       {"block.mlp.fc.bias", S(0)}, {"block.mlp.proj.weight", S(1)}},
      {{"block.mlp.fc.weight", S(0)}, {"block.mlp.fc.bias", S(0)}, {"block.mlp.proj.weight", S(1)},
       {"block.ln1.weight", S(0)}},
  };
  for (const auto& layout : layouts) {
    std::map<ValueId, NdPlacement> given;
    std::string what;
    for (const auto& [name, p] : layout) {
      given[named(g, name)] = {p};
      what += name + "=" + p.str() + " ";
    }
    const GraphPlacement plan = propagate_sharding(g, Mesh{{{"tp", 2}}}, given, {}, {});
    int sharded = 0;  // nodes that run on slices or partial sums, not replicated
    for (const auto& [node, sigs] : plan.signatures)
      for (const Placement& p : sigs[0].outputs) sharded += p.kind != Kind::broadcast;
    EXPECT_GE(sharded, 30) << what << "(of " << g.nodes().size() << " nodes)";
    const std::vector<Tensor> got = run_sharded(g, plan, values_of(f, {ids}));
    EXPECT_LE(test::scaled_max_error(got[0], loss), 1e-5) << what;
    for (std::size_t k = 0; k < gradients.size(); ++k)
      EXPECT_LE(test::scaled_max_error(got[1 + k], gradients[k]), 1e-5) << what << "gradient " << k;
  }
}

// Means over split rows: a cross-entropy and a mean, and their gradients, on rows split over a
// data-parallel axis: each device's mean counts its own rows, scaled to its share (mean_of_split),
// so the step stays local and computes the unsharded loss and gradient.
TEST(Sharding, MeansOverSplitRowsComputeTheSame) {
  Generator gen(11);
  Linear layer(8, 5, gen);
  const TracedFunction f = trace(
                               [&](const std::vector<Var>& in) {
                                 const Var y = layer(in[0]);
                                 return std::vector<Var>{cross_entropy(y, in[1]) + mean(y * y, {}, false)};
                               },
                               {{"x", {6, 8}}, {"targets", {6}, DType::i64}})
                               .with_gradients();
  const Graph& g = f.graph();
  std::map<ValueId, NdPlacement> required;
  for (ValueId v : g.outputs()) required[v] = {B};
  const GraphPlacement plan =
      propagate_sharding(g, Mesh{{{"dp", 2}}}, {{named(g, "x"), {S(0)}}, {named(g, "targets"), {S(0)}}}, required, {});
  for (const Transition& t : communicating(plan)) EXPECT_EQ(t.consumer, -1) << "value " << t.value << " inside the step";
  const Tensor x = test::random_tensor({6, 8}, 12);
  const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{0, 4, 2, 1, 3, 4}, {6});
  layer.zero_grad();
  const Tensor loss = f({x, targets})[0];
  const std::vector<Tensor> got = run_sharded(g, plan, values_of(f, {x, targets}));
  EXPECT_LE(test::scaled_max_error(got[0], loss), 1e-6);
  for (std::size_t k = 0; k < f.gradient_parameters().size(); ++k)
    EXPECT_LE(test::scaled_max_error(got[1 + k], f.parameters()[f.gradient_parameters()[k]].grad()), 1e-6) << "gradient " << k;
}

// Megatron's vocab-parallel tables: with the token embedding and the head split by vocabulary rows
// (and the head's input gradient all-reduced where it is made, Megatron's f), the lookup, the loss
// and their gradients run expanded (ShardSignature::expand): the lookup gives partial sums, the
// loss is whole on every device and the logits are never gathered; the tables' gradients stay
// split where they are required so. The position table, replicated, keeps its whole
// gradient (no all-gather). An op expanded along two mesh axes is refused where it is lowered.
TEST(Sharding, VocabParallelTablesRunExpanded) {
  struct Lm : Module {
    explicit Lm(Generator& gen)
        : wte(register_module("wte", std::make_shared<Embedding>(8, 4, gen))),
          wpe(register_module("wpe", std::make_shared<Embedding>(3, 4, gen))),
          head(register_module("head", std::make_shared<Linear>(4, 8, gen, false))) {}
    std::shared_ptr<Embedding> wte, wpe;
    std::shared_ptr<Linear> head;
  };
  Generator gen(13);
  Lm lm(gen);
  const TracedFunction f =
      trace(
          [&](const std::vector<Var>& in) {
            const Var pos = (*lm.wpe)(Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2}, {3}));
            return std::vector<Var>{cross_entropy((*lm.head)((*lm.wte)(in[0]) + pos), in[1])};
          },
          {{"ids", {3}, DType::i64}, {"targets", {3}, DType::i64}})
          .with_gradients();
  const Graph& g = f.graph();
  std::map<ValueId, NdPlacement> given{{named(g, "wte.weight"), {S(0)}}, {named(g, "head.weight"), {S(0)}}}, required;
  for (ValueId v : g.outputs()) required[v] = {B};
  for (const Node& node : g.nodes())
    if (node.backward && node.op == "matmul" && node.inputs[1] == named(g, "head.weight")) given[node.outputs[0]] = {B};
  for (std::size_t k = 0; k < f.gradient_parameters().size(); ++k) {
    const ValueId param = g.parameters()[f.gradient_parameters()[k]];
    if (given.count(param)) required[g.outputs()[1 + k]] = given.at(param);
  }
  const GraphPlacement plan = propagate_sharding(g, Mesh{{{"tp", 2}}}, given, required, {});
  std::map<std::string, int> expanded;
  for (const Node& node : g.nodes()) {
    const bool wte_table = node.op == "embedding" && node.inputs[0] == named(g, "wte.weight");
    if (plan.signatures.at(node.id)[0].expand) ++expanded[node.op + (wte_table ? " (wte)" : "")];
  }
  EXPECT_EQ(expanded, (std::map<std::string, int>{{"cross_entropy", 1}, {"cross_entropy_backward", 1}, {"embedding (wte)", 1},
                                                   {"embedding_backward", 1}}));
  for (const Transition& t : communicating(plan)) {
    EXPECT_EQ(t.collective, Collective::all_reduce) << "value " << t.value;  // the lookup's and the head's input gradient
    EXPECT_DOUBLE_EQ(t.bytes, 3 * 4 * 4) << "an activation [3, 4], not the logits [3, 8]";
  }
  EXPECT_EQ(communicating(plan).size(), 2u);

  const Mesh two_axes{{{"a", 2}, {"b", 2}}};
  std::map<ValueId, NdPlacement> both{{named(g, "wte.weight"), {S(0), S(0)}}};
  const GraphPlacement twice = propagate_sharding(g, two_axes, both, {}, {});
  test::expect_error_mentions([&] { shard_step(f, twice, MeshDevice{{0, 1}, {1, 2}}); },
                              {"shard_step: op 'embedding'", "runs expanded along mesh axes 'a' and 'b'"});
}

// A symbolic dim (the batch) is split only where it comes in split (the runtime's data
// parallelism): a partial sum meeting gelu is reduce-scattered along a fixed dim, never the batch,
// whose slices a device could not know the size of. With a fixed batch either dim will do.
TEST(Sharding, APlanNeverSplitsASymbolicDimItWasNotGivenSplit) {
  const auto plan_of = [](const SymShape& x_shape) {
    const TracedFunction f = trace([](const std::vector<Var>& in) { return std::vector<Var>{gelu(matmul(in[0], in[1]))}; },
                                   {{"x", x_shape}, {"w", {8, 6}}});
    const Graph& g = f.graph();
    return propagate_sharding(g, Mesh{{{"tp", 2}}}, {{named(g, "x"), {S(1)}}, {named(g, "w"), {S(0)}}}, {}, {{"batch", 4}});
  };
  const GraphPlacement symbolic = plan_of({SymDim::symbol("batch"), 8});
  ASSERT_EQ(communicating(symbolic).size(), 1u);
  EXPECT_EQ(communicating(symbolic)[0].collective, Collective::reduce_scatter);
  EXPECT_EQ(communicating(symbolic)[0].to, S(1)) << "not the batch";
  const GraphPlacement fixed = plan_of({4, 8});
  ASSERT_EQ(communicating(fixed).size(), 1u);
  EXPECT_EQ(communicating(fixed)[0].to, S(0)) << "the first dim that fits, when it is fixed";
}
