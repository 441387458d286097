// The gradient path of a program, wired at compile time: gradient stages -> (data parallel: bucket
// actors -> communicator actor -> bucket actors) -> optimizer actors, with the clip actor beside
// it taking the global norm. Everything is checked before the first actor is spawned.

#include <algorithm>

#include "actor_kinds.hpp"
#include "troupe/actors/tracer.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/transport/process_group.hpp"

namespace troupe::actors {

namespace {

// Every gradient must have an optimizer when optimizers are given (a silently skipped parameter
// would be a training bug).
void check_optimizers(const ProgramOptions& options, const std::vector<std::string>& names) {
  for (const auto& opt : options.optimizers) TROUPE_CHECK(opt != nullptr, invalid_argument, "compile: an optimizer is null");
  if (options.optimizers.empty()) return;
  for (const std::string& name : names) {
    if (name.empty()) continue;
    bool covered = false;
    for (const auto& opt : options.optimizers)
      for (const graph::Var& p : opt->parameters()) covered = covered || p.name() == name;
    TROUPE_CHECK(covered, invalid_argument, "compile: parameter '", name,
                 "' has a gradient but belongs to none of the optimizers");
  }
}

// The bucket plan of data parallelism (null when off), its buffers split evenly among the ranks with ZeRO-1.
std::shared_ptr<const BucketLayout> plan_data_parallel(const graph::TracedFunction& fn, const ActorGraph& plan,
                                                     const ProgramOptions& options) {
  const DataParallel& dp = options.data_parallel;
  TROUPE_CHECK(!dp.zero || dp.communicator, invalid_argument, "compile: data_parallel.zero needs a communicator");
  if (!dp.communicator) return nullptr;
  if (dp.zero) {
    TROUPE_CHECK(dp.zero_group && dp.zero_group->size() == dp.communicator->size() &&
                     dp.zero_group->rank() == dp.communicator->rank(), invalid_argument,
                 "compile: ZeRO-1 needs data_parallel.zero_group, a communicator of the same ranks as the gradients'");
    TROUPE_CHECK(options.optimizers.size() == 1, invalid_argument, "compile: ZeRO-1 shards one optimizer's state; give exactly one (got ",
                 options.optimizers.size(), ")");
    TROUPE_CHECK(options.clip_grad_norm == 0 || options.clip_mode == ClipMode::parallel, invalid_argument,
                 "compile: ZeRO-1 clips on the parallel path (each rank holds only its slice of the reduced gradients); "
                 "use ClipMode::parallel");
    TROUPE_CHECK(dp.compression.kind == GradCompression::Kind::none, invalid_argument, "compile: gradient compression (",
                 dp.compression.str(), ") needs ZeRO-1 off: ZeRO-1 reduce-scatters whole buckets; pick one of them");
  }
  TROUPE_CHECK(dp.fusion_mb >= 0 && dp.first_bucket_mb >= 0, invalid_argument,
               "compile: data_parallel fusion_mb and first_bucket_mb must be >= 0");
  TROUPE_CHECK(fn.output_count() < fn.graph().outputs().size(), invalid_argument,
               "compile: data parallelism needs gradients; trace the function with_gradients()");
  // Without overlap: one bucket per gradient tensor, all reduced after backward.
  const auto mb = [](double m) { return static_cast<std::size_t>(m * 1024 * 1024); };
  return std::make_shared<const BucketLayout>(layout_buckets(plan, fn, dp.overlap ? mb(dp.first_bucket_mb) : 0,
                                                         dp.overlap ? mb(dp.fusion_mb) : 0, dp.zero ? dp.communicator->size() : 1));
}

// Spawns the optimizer actors (one collector without optimizers, when there are gradients) and
// records which of them each gradient goes to.
void spawn_optimizers(caf::actor_system& sys, const ProgramOptions& options,
                      const std::shared_ptr<const std::vector<std::string>>& names, int gradients, const PeersPtr& peers) {
  GradientPath& path = peers->gradients;
  std::vector<std::shared_ptr<graph::Optimizer>> optimizers = options.optimizers;
  if (optimizers.empty() && gradients > 0) optimizers.push_back(nullptr);
  path.owners.assign(names->size(), {});
  for (std::size_t o = 0; o < optimizers.size(); ++o) {
    OptimizerSetup setup;
    setup.optimizer = optimizers[o];
    setup.index = static_cast<int>(o);
    setup.track = Tracer::instance().register_actor(setup.optimizer ? "optimizer " + std::to_string(o) : "gradients");
    setup.peers = peers;
    setup.names = names;
    setup.clipping = options.clip_grad_norm > 0 || options.loss_scaler;
    setup.returns = options.return_gradients;
    setup.zero = path.zero;
    for (std::size_t k = 0; k < names->size(); ++k) {
      const std::string& name = (*names)[k];
      bool owns = !name.empty() && !setup.optimizer;
      if (!name.empty() && setup.optimizer)
        for (const graph::Var& p : setup.optimizer->parameters()) owns = owns || p.name() == name;
      if (!owns) continue;
      path.owners[k].push_back(static_cast<int>(o));
      ++setup.gradients;
    }
    const std::uint32_t track = setup.track;
    path.optimizers.push_back({spawn_optimizer_actor(sys, std::move(setup)), track});
  }
}

}  // namespace

GradientActors spawn_gradient_path(caf::actor_system& sys, const graph::TracedFunction& fn, const ActorGraph& plan,
                                   const ProgramOptions& options, const PeersPtr& peers) {
  Tracer& tracer = Tracer::instance();
  GradientPath& path = peers->gradients;
  auto names = std::make_shared<std::vector<std::string>>(plan.sinks.size());
  path.clip_slot.assign(plan.sinks.size(), -1);
  path.norm_weight.assign(plan.sinks.size(), 1.0);
  const TensorParallel& tp = options.tensor_parallel;
  std::vector<double> slot_weights;
  int gradients = 0;
  for (std::size_t k = 0; k < plan.sinks.size(); ++k) {
    const int param = plan.sink_param[k];
    if (param < 0) continue;
    (*names)[k] = fn.parameters()[static_cast<std::size_t>(param)].name();
    path.clip_slot[k] = gradients++;
    if (tp.norms && std::find(tp.replicated.begin(), tp.replicated.end(), (*names)[k]) != tp.replicated.end())
      path.norm_weight[k] = 1.0 / tp.norms->size();
    slot_weights.push_back(path.norm_weight[k]);
  }
  check_optimizers(options, *names);
  path.buckets = plan_data_parallel(fn, plan, options);
  if (options.data_parallel.zero) {
    std::vector<Tensor> parameters(plan.sinks.size());
    for (std::size_t k = 0; k < plan.sinks.size(); ++k)
      if (plan.sink_param[k] >= 0) parameters[k] = fn.parameters()[static_cast<std::size_t>(plan.sink_param[k])].tensor();
    path.zero = std::make_shared<ZeroShard>(path.buckets, parameters, *names, plan.sink_param, options.optimizers[0],
                                            options.data_parallel.zero_group);
  }

  spawn_optimizers(sys, options, names, gradients, peers);
  GradientActors out;
  for (const auto& o : path.optimizers) out.all.push_back(caf::actor_cast<caf::actor>(o.actor));
  out.counts = {{"optimizer", static_cast<int>(options.optimizers.size())}, {"clip", 0}, {"bucket", 0}, {"communicator", 0}};
  if (options.clip_grad_norm > 0 || options.loss_scaler) {
    ClipSetup clip;
    clip.max_norm = options.clip_grad_norm;
    clip.scaler = options.loss_scaler;
    clip.takes_norms = options.clip_mode == ClipMode::parallel;
    clip.weights = slot_weights;
    if (tp.norms) clip.norms.push_back(tp.norms);
    if (options.pipeline_norms) clip.norms.push_back(options.pipeline_norms);
    if (path.zero) clip.norms.push_back(options.data_parallel.zero_group);
    // Parallel clip with data parallelism sums the reduced buckets' norms, else one per gradient.
    clip.slots = path.buckets && clip.takes_norms ? static_cast<int>(path.buckets->buckets.size()) : gradients;
    clip.track = tracer.register_actor("clip");
    clip.norms_track = clip.norms.empty() ? clip.track : tracer.register_actor("communicator clip norms");
    clip.peers = peers;
    path.clip_takes_norms = clip.takes_norms;
    path.clip = {spawn_clip_actor(sys, clip), clip.track};
    out.all.push_back(caf::actor_cast<caf::actor>(path.clip.actor));
    out.counts["clip"] = 1;
  }
  if (path.buckets) {
    const DataParallel& dp = options.data_parallel;
    for (std::size_t b = 0; b < path.buckets->buckets.size(); ++b) {
      const std::uint32_t track = tracer.register_actor("bucket " + std::to_string(b));
      path.bucket_actors.push_back({spawn_bucket_actor(sys, static_cast<int>(b), track, peers), track});
      out.all.push_back(caf::actor_cast<caf::actor>(path.bucket_actors.back().actor));
    }
    const std::string& name = dp.communicator->name();
    if (dp.compression.kind != GradCompression::Kind::none)
      path.compression = std::make_shared<BucketCompressors>(
          *path.buckets, dp.compression, *names, dp.communicator,
          dp.gradients_mean ? transport::ReduceOp::mean : transport::ReduceOp::sum);
    CommunicatorSetup comm{dp.communicator, dp.overlap, dp.gradients_mean, dp.zero,
                           tracer.register_actor("collectives " + name), tracer.register_actor("communicator " + name), peers};
    path.communicator = {spawn_communicator_actor(sys, comm), comm.track};
    out.all.push_back(caf::actor_cast<caf::actor>(path.communicator.actor));
    out.counts["bucket"] = static_cast<int>(path.bucket_actors.size());
    out.counts["communicator"] = 1;
  }
  return out;
}

}  // namespace troupe::actors
