// A rank's stage of a pipeline (pipeline_rank.hpp).
#include "pipeline_rank.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "troupe/actors/tensor_parallel.hpp"
#include "troupe/graph/collectives.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

using detail::str_cat;

// The forward of stage `s` of `layers`' split of `policy`, to trace.
graph::TraceableFn stage_function(const plan::StagePolicy& policy, const std::vector<int>& layers, int s) {
  plan::StageSpan span;
  span.begin = std::accumulate(layers.begin(), layers.begin() + s, 0);
  span.end = span.begin + layers[static_cast<std::size_t>(s)];
  span.first = s == 0;
  span.last = s + 1 == static_cast<int>(layers.size());
  return [forward = policy.forward, span](const std::vector<graph::Var>& inputs) { return forward(span, inputs); };
}

}  // namespace

PipelineRank::PipelineRank(Job& job, std::vector<int> members, const plan::StagePolicy& policy, std::vector<int> layers,
                           const std::vector<graph::InputSpec>& signature, const graph::AmpOptions& amp)
    : members_(std::move(members)), layers_(std::move(layers)), policy_(policy), amp_(amp) {
  const auto me = std::find(members_.begin(), members_.end(), job.rank());
  TROUPE_CHECK(me != members_.end() && layers_.size() == members_.size(), invalid_argument, "pipeline: rank ", job.rank(),
               " is not among its pipeline's ranks");
  stage_ = static_cast<int>(me - members_.begin());
  TROUPE_CHECK(policy_.forward && policy_.layers >= 1, invalid_argument, "--pp ", stages(),
               ": the model brings no split into stages (TrainingProblem::stages)");
  // Every stage traced here, so that each rank knows what crosses each boundary and whose the
  // parameters are (the gathers of checkpoints need it), without asking the others.
  graph::InputSpec activation;
  owned_.resize(members_.size());
  for (int s = 0; s < stages(); ++s) {
    std::vector<graph::InputSpec> sig = signature;
    if (s > 0) sig.insert(sig.begin(), activation);
    const graph::TracedFunction forward = graph::trace(stage_function(policy_, layers_, s), sig).with_amp(amp_);
    for (const graph::Var& p : forward.parameters()) {
      for (int t = 0; t < s; ++t)
        TROUPE_CHECK(!owned_[static_cast<std::size_t>(t)].count(p.name()), invalid_argument, "pipeline: parameter '",
                     p.name(), "' is read by stages ", t, " and ", s, " (", policy_.name,
                     "); stages share no parameters, so untie it or keep its readers in one stage (--pp-layers)");
      owned_[static_cast<std::size_t>(s)].insert(p.name());
    }
    const graph::ValueInfo& out = forward.graph().value(forward.graph().outputs().at(0)).info;
    if (s == stage_) signature_ = sig;
    if (s + 1 == stages())
      TROUPE_CHECK(out.shape.empty(), invalid_argument, "pipeline: the last stage (", policy_.name,
                   ") returns a value of shape ", graph::sym_shape_str(out.shape), "; it must return the loss");
    activation = {"activation", out.shape, out.dtype};
  }
  // The pipeline's group, then its channels: each boundary carries activations one way and their
  // gradients the other, each on a communicator of its own (a send never waits behind a receive).
  // Boundaries (s, s + 1) of even s are made first, then those of odd s: each call is a partition
  // of the ranks, as Job::communicator asks.
  group_ = job.communicator(members_, "pp", 8);
  for (int parity = 0; parity < 2 && parity < stages() - 1; ++parity)
    for (const bool gradients : {false, true}) {
      int up = -1;  // the upstream stage of this rank's boundary in this call
      if (stage_ % 2 == parity && stage_ + 1 < stages()) up = stage_;
      else if (stage_ >= 1 && (stage_ - 1) % 2 == parity) up = stage_ - 1;
      const std::vector<int> ranks = up < 0 ? std::vector<int>{job.rank()}
                                            : std::vector<int>{members_[static_cast<std::size_t>(up)], members_[static_cast<std::size_t>(up) + 1]};
      const char* kind = gradients ? "gradients" : "activations";
      std::shared_ptr<transport::Communicator> comm = job.communicator(ranks, kind, gradients ? 10 : 9);
      if (up < 0) continue;
      const std::string name = str_cat("pp ", kind, " of stages ", up, "-", up + 1);
      registrations_.push_back(std::make_unique<graph::GroupRegistration>(communicator_group(comm, name)));
      links_.push_back(std::move(comm));
      const int id = registrations_.back()->id();
      const bool downstream = up != stage_;
      if (!gradients) (downstream ? channels_.activation_in : channels_.activation_out) = id;
      else (downstream ? channels_.gradient_out : channels_.gradient_in) = id;
    }
}

PipelineRank::~PipelineRank() = default;

graph::TracedFunction PipelineRank::forward() const {
  return graph::trace(graph::stage_forward(stage_function(policy_, layers_, stage_), channels_), signature_).with_amp(amp_);
}

std::vector<Tensor> PipelineRank::inputs(const std::vector<Tensor>& batch) const {
  if (stage_ == 0) return batch;
  TROUPE_CHECK(batch.size() + 1 == signature_.size(), invalid_argument, "pipeline stage ", stage_, ": a batch of ",
               batch.size(), " tensors for a step of ", signature_.size() - 1, " inputs");
  // The received activation's dims are the batch's (its rows, a sequence's length).
  graph::SymBindings bindings;
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const graph::SymShape& spec = signature_[k + 1].shape;
    for (std::size_t d = 0; d < spec.size() && d < batch[k].shape().size(); ++d)
      if (spec[d].symbols().size() == 1 && spec[d].size() == 1) bindings[spec[d].symbols()[0]] = batch[k].shape()[d];
  }
  std::vector<Tensor> out{Tensor::zeros({}, signature_[0].dtype).expand(graph::bind(signature_[0].shape, bindings))};
  out.insert(out.end(), batch.begin(), batch.end());
  return out;
}

double PipelineRank::from_last(double mine) const {
  const Tensor value = Tensor::from_vector(std::vector<double>{mine}, {1});
  // On the caller's thread, after the step answered: no handler waits here.
  group_->submit([&](transport::ProcessGroup& g) { g.broadcast(value, stages() - 1); }).get();
  return value.to_vector<double>()[0];
}

double PipelineRank::add_to_sum(double mine) const {
  const Tensor value = Tensor::from_vector(std::vector<double>{mine}, {1});
  group_->submit([&](transport::ProcessGroup& g) { g.all_reduce(value); }).get();
  return value.to_vector<double>()[0];
}

std::map<std::string, Tensor> PipelineRank::gather(const std::map<std::string, Tensor>& mine) const {
  std::map<std::string, Tensor> whole;
  for (int s = 0; s < stages(); ++s) {
    // Stage s's tensors as one message: their size first, then their bytes (safetensors').
    const std::string bytes = s == stage_ ? graph::safetensors_bytes(mine) : std::string();
    const Tensor size = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(bytes.size())}, {1});
    Tensor data;
    group_->submit([&](transport::ProcessGroup& g) {
          g.broadcast(size, s);
          data = Tensor::empty({size.to_vector<std::int64_t>()[0]}, DType::u8);
          if (s == stage_) std::memcpy(data.raw_data(), bytes.data(), bytes.size());
          g.broadcast(data, s);
        })
        .get();
    const std::string received(static_cast<const char*>(data.raw_data()), static_cast<std::size_t>(data.nbytes()));
    for (auto& [key, t] : graph::parse_safetensors(received, str_cat("pipeline stage ", s)).tensors) whole[key] = t;
  }
  return whole;
}

bool PipelineRank::takes(const std::string& key) const {
  // Gradient compression's warm starts and choices ("grad_compression.<parameter>.q") are a parameter's too.
  const std::string prefix = "grad_compression.";
  const std::string name = key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : key;
  for (std::size_t s = 0; s < owned_.size(); ++s)
    for (const std::string& p : owned_[s])
      if (name == p || name.rfind(p + ".", 0) == 0) return static_cast<int>(s) == stage_;
  return true;
}

}  // namespace troupe::actors
