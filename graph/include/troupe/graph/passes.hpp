#pragma once
// Graph passes: rewrites of a traced graph, run as a fixed pipeline per JIT level. Level 2's keep
// every value bit-identical; level 3's fusion replaces op chains by fused kernels that round
// differently (within 1e-6 relative). Each pass returns a new graph; the signature (inputs, parameters, outputs)
// never changes, so a TracedFunction's bookkeeping stays valid. The pipeline checks the graph after
// each pass (debug builds, or when asked) and can dump it before and after each pass.

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "troupe/graph/graph.hpp"

namespace troupe::graph {

/// One rewrite of the pipeline: a name (dump files and statistics use it) and the function.
struct Pass {
  const char* name;
  Graph (*run)(const Graph& g);
};

/// Node counts around one pass of a pipeline run.
struct PassStat {
  std::string pass;
  std::size_t nodes_before = 0, nodes_after = 0;
};

/// Whether optimize() checks the graph after each pass unless told otherwise: in debug builds.
#ifdef NDEBUG
inline constexpr bool kCheckGraphsByDefault = false;
#else
inline constexpr bool kCheckGraphsByDefault = true;
#endif

/// The TROUPE_DUMP_GRAPH environment variable (a folder for graph dumps), or empty.
std::string dump_dir_from_env();

/// The name that switches level 3's memory planning (arenas and buffer reuse) off in
/// TROUPE_DISABLE_PASSES, next to the pipeline's pass names.
inline constexpr const char* kMemoryPlanningPass = "memory-planning";

/// The TROUPE_DISABLE_PASSES environment variable: comma-separated pass names that optimize()
/// skips (and kMemoryPlanningPass), to measure what each pass gives or to bisect a suspect one.
/// An unknown name is an error listing the known ones.
std::set<std::string> disabled_passes_from_env();

/// How optimize() runs its passes.
struct OptimizeOptions {
  bool check = kCheckGraphsByDefault;        // check_graph and check_rewrite after each pass
  std::string dump_dir = dump_dir_from_env();  // text dumps before and after each pass; empty = none
  bool inference = false;                      // the graph will never be differentiated: level 3
                                               // also chooses convolution algorithms and layouts
  std::set<std::string> disabled = disabled_passes_from_env();  // passes to skip
};

/// The passes JIT level `level` runs, in order: none at levels 0 and 1; at levels 2 and 3,
/// constant folding, algebraic simplification, common-subexpression elimination, dead-code
/// elimination; at level 3 then attention, causal-softmax, bias-gelu, matmul-bias, product-cast,
/// add-layer-norm, norm-cast, conv-relu and elementwise fusion and recomputation, and for an
/// `inference` graph the choice of convolution algorithms and of layouts and conv-residual fusion.
/// Throws for a level outside 0..3.
std::vector<Pass> pipeline(int level, bool inference = false);

/// Runs pipeline(level) on `g` and returns the result; `stats`, when given, receives one entry per
/// pass. Dumps go to `<dump_dir>/NN-<pass>.txt` (NN counts on across the graphs of a process, and
/// each graph starts with NN-input.txt); a folder that cannot be written is an io Error saying so.
Graph optimize(const Graph& g, int level, const OptimizeOptions& options = {}, std::vector<PassStat>* stats = nullptr);

/// Folds nodes whose inputs are all constants (and zeros_like of a fixed shape) into constants.
/// Leaves nodes with side effects, in custom-gradient regions, with gradient overrides or whose
/// outputs are graph outputs.
Graph fold_constants(const Graph& g);
/// Removes work that gives its input back bit for bit: x*1, x+(-0), x-0, x/1 (scalar or constant
/// forms, only when x already has the result's shape, dtype and dense layout), permutes that
/// compose (to the identity: the input; else one permute), reshape chains and reshapes to the same
/// shape (of dense values).
Graph simplify_algebra(const Graph& g);
/// Merges nodes with the same op, inputs, attributes, target, label, gradient override and region.
Graph eliminate_common_subexpressions(const Graph& g);
/// Replaces matmul(softmax(causal_mask(mul_scalar(matmul(q, k, trans_b), s))), v) by one
/// causal_attention(q, k, v, s) where the chain's values have no other reader: in a forward graph,
/// before the gradients are taken (TracedFunction::optimized), so autodiff uses the fused backward.
Graph fuse_attention(const Graph& g);
/// Replaces softmax(causal_mask(mul_scalar(x, s), -inf)) that attention fusion left, at O2 between
/// its casts up and down, by one causal_softmax(x, s) where the chain's values have no other
/// reader: in a forward graph, before the gradients are taken.
Graph fuse_causal_softmax(const Graph& g);
/// Replaces gelu(add(h, b)), b a bias over h's last dim, by one bias_gelu(h, b) (the same bits)
/// where the sum has no other reader: in a forward graph, before the gradients are taken.
Graph fuse_bias_gelu(const Graph& g);
/// Replaces add(matmul(a, w), b), b a bias over the product's last dim, by one matmul_bias(a, w, b)
/// (within rounding: the GEMM accumulates onto the bias) where the product has no other reader;
/// after bias-gelu fusion, in a forward graph, before the gradients are taken.
Graph fuse_matmul_bias(const Graph& g);
/// Replaces cast(p, f32), p a bf16 or f16 matmul or matmul_bias written low and read only by the
/// cast, by p written as f32 (closer to f32 than the pair: one rounding fewer); a matmul_bias's bias
/// cast from f32 is dropped for the f32 bias. After matmul-bias fusion, forward and backward nodes.
Graph fuse_product_casts(const Graph& g);
/// Replaces layer_norm(add(a, b)), b of a's last dims, by one add_layer_norm(a, b) giving the sum
/// and the normalised sum (the same bits) where the layer norm is the sum's first reader: in a
/// forward graph, before the gradients are taken, whose backward then adds the residual stream's
/// gradient inside the layer norm's backward.
Graph fuse_add_layer_norm(const Graph& g);
/// Replaces cast(y, bf16 or f16), y the output of an f32 layer_norm or add_layer_norm read only by
/// the cast, by the norm writing y in that dtype (attribute y_dtype; the same bits): in a forward
/// graph, before the gradients are taken.
Graph fuse_norm_casts(const Graph& g);
/// Replaces relu(conv2d(x, w, b)) by conv2d with a relu epilogue (attribute relu=1; the same
/// bits) where the conv's output has no other reader: in a forward graph, before the gradients.
Graph fuse_conv_relu(const Graph& g);
/// Replaces each tree of elementwise nodes (add, mul, gelu, relu_backward, ...; at most 4 inputs
/// and 16 nodes) whose intermediate values have no reader outside it and the root's shape by one
/// elementwise_chain node, computed tile by tile in one pass (dense inputs: the same bits). Runs
/// last among the fusions, on forward graphs and again on differentiated ones.
Graph fuse_elementwise_chains(const Graph& g);
/// In a differentiated graph, computes again, right before its first backward reader, each forward
/// value the backward reads that an elementwise op makes from values the backward
/// holds anyway (the same bits), so it is not kept from the forward to the backward. The
/// recomputation waits for the backward to reach it (op after). No-op on graphs without backward.
Graph recompute_activations(const Graph& g);
/// Asks 3x3 stride-1 f32 convolutions for Winograd (attribute winograd=1; within about 1e-6 of
/// the direct convolution). For inference graphs (oneDNN has no Winograd gradient).
Graph choose_conv_algorithms(const Graph& g);
/// Keeps activations channel-blocked ([N, C/16, H, W, 16]) where they flow only between conv2d
/// nodes and elementwise ops of one shape, so the convolutions run without reorders; graph outputs
/// and other readers keep NCHW. For inference graphs (a blocked conv has no gradient).
Graph choose_layouts(const Graph& g);
/// Replaces add(r, conv2d(x, w, b)) by conv2d_residual(r, x, w, b) (the conv adds itself to r, in
/// r's buffer when r dies there) where the conv has no relu epilogue and no other reader. For
/// inference graphs (conv2d_residual has no gradient); after layout choice.
Graph fuse_conv_residual(const Graph& g);
/// Removes nodes whose outputs nobody reads, except nodes with side effects; a custom-gradient
/// region goes or stays as a whole. Constants nobody reads go too.
Graph eliminate_dead_code(const Graph& g);

/// Throws a runtime Error naming the first broken rule: node ids in order, inputs defined before
/// use, every value's producer and output index consistent, output infos equal to re-running the
/// op's inference, graph outputs defined, constants matching their info, custom-gradient regions
/// contiguous with their inputs and outputs in place, gradient overrides registered.
void check_graph(const Graph& g);
/// Throws a runtime Error naming `pass` when `after` does not keep `before`'s signature (inputs and
/// parameters by name and info, in order; outputs by info) or has a custom-gradient region or a
/// gradient override that `before` has not.
void check_rewrite(const Graph& before, const Graph& after, const std::string& pass);

}  // namespace troupe::graph
