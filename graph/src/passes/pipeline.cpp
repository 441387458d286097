// The pass manager: the fixed pipeline of each JIT level, run with checks and dumps.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "troupe/graph/passes.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::graph {

namespace {
// Dump files are numbered across every graph a process optimizes, so none overwrites another.
std::atomic<int> dump_counter{0};

void write_dump(const std::string& dir, const char* stage, const Graph& g) {
  char number[16];
  std::snprintf(number, sizeof number, "%02d", dump_counter.fetch_add(1));
  const std::string path = dir + "/" + number + "-" + stage + ".txt";
  std::ofstream file(path);
  file << g.dump();
  file.close();
  TROUPE_CHECK(file.good(), io, "TROUPE_DUMP_GRAPH: cannot write '", path,
               "'; create the folder, make it writable, or unset TROUPE_DUMP_GRAPH");
}
}  // namespace

std::string dump_dir_from_env() {
  const char* env = std::getenv("TROUPE_DUMP_GRAPH");
  return env ? std::string(env) : std::string();
}

std::set<std::string> disabled_passes_from_env() {
  const char* env = std::getenv("TROUPE_DISABLE_PASSES");
  std::set<std::string> names;
  if (!env) return names;
  std::set<std::string> known{kMemoryPlanningPass};
  for (const Pass& p : pipeline(3, true)) known.insert(p.name);
  std::string list = env;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    if (!known.count(name)) {
      std::string all;
      for (const std::string& k : known) all += " " + k;
      fail(ErrorKind::invalid_argument, "TROUPE_DISABLE_PASSES: unknown pass '", name, "'; the passes are:", all);
    }
    names.insert(name);
  }
  return names;
}

std::vector<Pass> pipeline(int level, bool inference) {
  TROUPE_CHECK(level >= 0 && level <= 3, invalid_argument, "jit level ", level, " is not in 0..3");
  if (level < 2) return {};  // level 1 runs the graph as traced
  // Folding and simplification first: they leave nodes for CSE to merge and dead ones for DCE.
  // Level 3 fuses after them, then (inference only) chooses algorithms and layouts for the convolutions;
  // its memory planning happens when the graph runs (TracedFunction, arena_layouts.hpp).
  std::vector<Pass> passes{{"constant-folding", fold_constants},
                           {"algebraic-simplification", simplify_algebra},
                           {"cse", eliminate_common_subexpressions},
                           {"dce", eliminate_dead_code}};
  if (level == 3) {
    passes.push_back({"attention-fusion", fuse_attention});
    passes.push_back({"causal-softmax-fusion", fuse_causal_softmax});
    passes.push_back({"bias-gelu-fusion", fuse_bias_gelu});
    passes.push_back({"matmul-bias-fusion", fuse_matmul_bias});
    passes.push_back({"product-cast-fusion", fuse_product_casts});
    passes.push_back({"add-layer-norm-fusion", fuse_add_layer_norm});
    passes.push_back({"norm-cast-fusion", fuse_norm_casts});
    passes.push_back({"conv-relu-fusion", fuse_conv_relu});
    passes.push_back({"elementwise-fusion", fuse_elementwise_chains});
    passes.push_back({"recomputation", recompute_activations});
    if (inference) {
      passes.push_back({"conv-algorithm-choice", choose_conv_algorithms});
      passes.push_back({"layout-choice", choose_layouts});
      passes.push_back({"conv-residual-fusion", fuse_conv_residual});
    }
  }
  return passes;
}

Graph optimize(const Graph& g, int level, const OptimizeOptions& options, std::vector<PassStat>* stats) {
  const std::vector<Pass> passes = pipeline(level, options.inference);
  if (options.check) check_graph(g);
  if (!options.dump_dir.empty()) write_dump(options.dump_dir, "input", g);
  Graph current = g;
  for (const Pass& pass : passes) {
    if (options.disabled.count(pass.name)) continue;
    Graph next = pass.run(current);
    if (options.check) {
      check_graph(next);
      check_rewrite(current, next, pass.name);
    }
    if (!options.dump_dir.empty()) write_dump(options.dump_dir, pass.name, next);
    if (stats) stats->push_back(PassStat{pass.name, current.nodes().size(), next.nodes().size()});
    current = std::move(next);
  }
  return current;
}

}  // namespace troupe::graph
