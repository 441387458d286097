#pragma once
// One rank's stage of a pipeline (docs/PARALLELISM.md, "Pipeline parallelism"): its layers of the
// model, its channels to the neighbouring stages, its traced step, and the moves of whole tensors
// between the stages that the loss, checkpoints and evaluation need. ParallelTraining owns one
// when pp > 1.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "troupe/actors/job.hpp"
#include "troupe/graph/amp.hpp"
#include "troupe/graph/pipeline_stage.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/plan/stages.hpp"

namespace troupe::graph {
class GroupRegistration;
}

namespace troupe::actors {

/// A rank's stage of one pipeline: `members` are the pipeline's ranks in stage order, this rank
/// among them; `layers` each stage's layer count.
class PipelineRank {
 public:
  /// Traces every stage's forward (to learn what crosses each boundary and which parameters each
  /// stage trains; a parameter two stages read is refused), then joins the pipeline's groups: a
  /// collective of the whole job, every rank making its pipeline's at the same point.
  PipelineRank(Job& job, std::vector<int> members, const plan::StagePolicy& policy, std::vector<int> layers,
               const std::vector<graph::InputSpec>& signature, const graph::AmpOptions& amp);
  ~PipelineRank();
  PipelineRank(const PipelineRank&) = delete;
  PipelineRank& operator=(const PipelineRank&) = delete;

  int stage() const { return stage_; }
  int stages() const { return static_cast<int>(members_.size()); }
  bool last() const { return stage_ + 1 == stages(); }
  /// Each stage's layer count.
  const std::vector<int>& layers() const { return layers_; }
  /// This stage's forward, traced with its receives (graph::stage_forward) and autocast: what
  /// TracedFunction::with_stage_gradients(channels()) makes the stage's step of.
  graph::TracedFunction forward() const;
  /// The channels this stage meets its neighbours on.
  const graph::StageChannels& channels() const { return channels_; }
  /// The parameters this stage trains (those its layers read), by name.
  const std::set<std::string>& parameters() const { return owned_[static_cast<std::size_t>(stage_)]; }
  /// The step's inputs from the batch's: after the first stage, a stand-in of the received
  /// activation's shape (a broadcast zero: no memory) before them.
  std::vector<Tensor> inputs(const std::vector<Tensor>& batch) const;
  /// The group of the pipeline's stages (clipping's norm, the loss, the gathers below).
  const std::shared_ptr<transport::Communicator>& group() const { return group_; }
  /// The last stage's value of `mine` (the loss) on every stage: a collective of the pipeline,
  /// on the caller's thread, after a step.
  double from_last(double mine) const;
  /// Adds `mine` to the stages' sum, whose result it returns: a collective of the pipeline, on the
  /// caller's thread.
  double add_to_sum(double mine) const;
  /// Whole tensors from the stages' parts: each stage's `mine` (its parameters' values, or their
  /// optimizer state), joined. A collective of the pipeline, between steps.
  std::map<std::string, Tensor> gather(const std::map<std::string, Tensor>& mine) const;
  /// Whether a tensor of a whole state keyed `key` ("<parameter>" or "<parameter>.<slot>") is
  /// this stage's: those of other stages' parameters are not; those of none (an optimizer's
  /// settings, "group0.lr") are every stage's.
  bool takes(const std::string& key) const;

 private:
  std::vector<int> members_;
  int stage_ = 0;
  std::vector<int> layers_;
  plan::StagePolicy policy_;
  std::vector<graph::InputSpec> signature_;  // this stage's: the received activation first, then the batch's
  graph::AmpOptions amp_;
  std::vector<std::set<std::string>> owned_;  // per stage: the parameters it trains
  std::shared_ptr<transport::Communicator> group_;
  std::vector<std::shared_ptr<transport::Communicator>> links_;  // this rank's channels' communicators
  std::vector<std::unique_ptr<graph::GroupRegistration>> registrations_;
  graph::StageChannels channels_;
};

}  // namespace troupe::actors
