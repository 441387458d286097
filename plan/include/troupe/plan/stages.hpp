#pragma once
// How a model splits into pipeline stages (docs/PARALLELISM.md, "Pipeline parallelism"): each
// stage a contiguous run of the model's layers, the first with what comes before them (a GPT's
// embeddings) and the last with what comes after (its head and loss). A model brings its
// StagePolicy as it brings its PlacementPolicy; the stages' layer counts are given or split evenly.

#include <functional>
#include <string>
#include <vector>

#include "troupe/graph/trace.hpp"
#include "troupe/graph/var.hpp"

namespace troupe::plan {

/// One stage's place in the pipeline: its layers [begin, end), and whether it is the first (it
/// takes the step's inputs) or the last (it returns the loss). Stages may hold no layers, so the
/// flags are not begin == 0 and end == layers.
struct StageSpan {
  int begin = 0, end = 0;
  bool first = true, last = true;
};

/// A model's split into pipeline stages.
struct StagePolicy {
  std::string name;  // for errors ("GPT blocks")
  int layers = 0;    // the layers stages take contiguous runs of (a GPT's blocks)
  /// The forward of one stage: the first takes the step's inputs (what comes before the layers,
  /// a GPT's embeddings, is its), a later one the previous stage's output as input 0, then the
  /// step's inputs; the last returns the loss (what comes after the layers is its), the others
  /// their output.
  std::function<std::vector<graph::Var>(const StageSpan& span, const std::vector<graph::Var>& inputs)> forward;
};

/// The layers of each of `stages` stages of `layers` as even as they split, earlier stages taking
/// one more; with `given` (non-empty) that split, checked: one count per stage, none negative,
/// adding up to the layers. Throws naming what is wrong.
std::vector<int> stage_layers(int layers, int stages, const std::vector<int>& given = {});

/// For planning (nothing runs): each stage's step of `policy` split by `layers`, as a pipeline
/// runs it (graph::stage_forward, TracedFunction::with_stage_gradients), the step taking
/// `signature` (the batch's inputs; a later stage the previous one's output before them), its
/// sends and receives named by channel ids no group is registered under.
std::vector<graph::TracedFunction> trace_stage_steps(const StagePolicy& policy, const std::vector<int>& layers,
                                                     const std::vector<graph::InputSpec>& signature);

}  // namespace troupe::plan
