#pragma once
// A compiled actor graph: what Engine::compile returns. Each run() is one training (or inference)
// step over the same actors; steps queue up and run one after another.

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/graph/grad_scaler.hpp"
#include "troupe/graph/arena_layouts.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/kernels/dropout.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::transport {
class Communicator;
}

namespace troupe::actors {

/// How data parallelism's gradient buckets travel (docs/PARALLELISM.md, "Gradient compression"):
/// whole in f32; as bf16 (half the bytes; each rank's gradient rounded once, the sum rounded per
/// ring hop); or PowerSGD: each matrix gradient [n, m] as rank-r factors P [n, r] and Q [m, r]
/// (r (n + m) values instead of n m), with error feedback (what the factors missed is added to the
/// next step's gradient) and the last step's Q as the start (warm start), the other gradients whole;
/// the first `warmup_steps` steps go whole. Every rank decompresses the same reduced factors, so the
/// replicas stay identical. Auto chooses per bucket among none, bf16 and PowerSGD of rank 32 or 16
/// (lower ranks trail the uncompressed loss with AdamW) once it has measured a few uncompressed
/// steps: the least compression that keeps the collectives from costing the step
/// (CompressionState::choice says what it chose).
struct GradCompression {
  enum class Kind { none, bf16, powersgd, automatic } kind = Kind::none;
  int rank = 0;           // PowerSGD's rank r (auto: the lowest rank it may choose)
  int warmup_steps = 10;  // PowerSGD: steps sent whole before the factors take over
  /// Parses "none", "bf16", "powersgd:R" (R from 1 to 64) or "auto"; throws naming the text and what is accepted.
  static GradCompression parse(const std::string& text);
  /// The text parse() reads back.
  std::string str() const;
};

/// Gradient compression's state on one rank (Program::compression_state), for checkpoints:
/// PowerSGD's error feedback and warm starts, the rounds reduced, and auto's choices.
class CompressionState {
 public:
  virtual ~CompressionState() = default;
  /// The state, the same on every rank: "<parameter>.powersgd_error" is what the ranks' factors
  /// have missed so far, reduced as the gradients are (what the next reduced gradient is owed, the
  /// same whatever the ranks' count); "grad_compression.<parameter>.q" the warm start,
  /// "grad_compression.<parameter>.choice" auto's choice (0 none, 1 bf16, R + 1 powersgd:R),
  /// "grad_compression.rounds" the steps reduced. A collective of the data-parallel ranks, each
  /// calling it between steps.
  virtual std::map<std::string, Tensor> gather() const = 0;
  /// Takes a state gather() gave under any number of ranks, between steps: each rank owes the
  /// reduced error again (all of it when the gradients are averaged, its 1/n share when summed);
  /// a warm start of another rank r, or of a parameter not factored now, is left out. Throws
  /// naming a tensor of another shape, changing nothing.
  virtual void load(const std::map<std::string, Tensor>& state) = 0;
  /// Auto's choice per bucket and why, once made; empty before (and without auto).
  virtual std::string choice() const = 0;
  /// Whether `key` of a saved state is one gather() writes.
  static bool holds(const std::string& key);
};

/// Data parallelism over the ranks of a communicator. Gradients are packed in one fixed order (the
/// same on every rank) into buckets of up to `fusion_mb`, the first one small so communication
/// starts early; a bucket's AllReduce starts as soon as its last gradient is complete, while
/// backward goes on, and each reduced bucket takes its own squared norm for clipping. 0-d outputs
/// (the loss) are averaged over the ranks too, so every rank reports the same loss.
struct DataParallel {
  std::shared_ptr<transport::Communicator> communicator;  // null: no data parallelism
  double fusion_mb = 64;
  double first_bucket_mb = 1;
  bool gradients_mean = true;  // average (true) or sum the ranks' gradients
  /// True: buckets fused up to fusion_mb, each AllReduced as soon as its gradients are complete,
  /// while backward goes on. False: the textbook order, one AllReduce per gradient tensor after the
  /// whole step (for comparison; what overlap gains is `bench/run dp`'s dp-advanced-vs-standard).
  bool overlap = true;
  /// ZeRO stage 1 (the article's enable_parallel_optimizer): each bucket is reduce-scattered
  /// instead of all-reduced, each rank updates only its 1/n of every bucket (keeping 1/n of the
  /// optimizer state), and the updated parameters are all-gathered on `zero_group` after the step
  /// answers, overlapping the next step's forward (Program::settle waits for it); clipping sums
  /// the ranks' shares of the norm there too. Needs one optimizer and
  /// `zero_group`, a communicator of the same ranks as `communicator` (its own transport, so its
  /// collectives never queue behind a bucket's).
  bool zero = false;
  std::shared_ptr<transport::Communicator> zero_group;
  /// How the buckets travel; anything but none needs zero off (ZeRO-1 reduce-scatters them).
  GradCompression compression;
};

/// Tensor parallelism: the program runs one device's part of a sharded step (graph/spmd.hpp,
/// tensor_parallel.hpp), whose collectives are in its graph. Clipping takes the norm of the whole
/// model: each device sums the squared norms of its gradients, those of the parameters every
/// device of the group holds whole counted 1/n, and the devices of the group add their sums.
struct TensorParallel {
  /// The device's tensor-parallel group, for the clipping norm alone (its own channel: the
  /// step's collectives run elsewhere); null: no tensor parallelism.
  std::shared_ptr<transport::Communicator> norms;
  /// The parameters every device of the group holds whole (tensor_parallel.hpp: replicated_parameters).
  std::vector<std::string> replicated;
};

/// Where the global gradient norm of clipping is computed.
enum class ClipMode {
  /// Each gradient stage takes its gradient's squared norm as soon as that gradient is complete,
  /// while the rest of backward still runs; the clip actor only sums the partial norms.
  parallel,
  /// One pass over all gradients after the whole step finished (the textbook order).
  naive,
};

/// Which programs group graph nodes into shared actors (ProgramOptions::group_ops): programs
/// without gradients, every program (a training step's cheap ops only), or none.
enum class OpGrouping { inference, all, none };

/// How a graph is lowered and run.
struct ProgramOptions {
  /// Registers per actor output (the register protocol): 1 = lock-step, 2 = double buffering.
  int registers = 2;
  /// Micro-batches per step: every input is split along dim 0 (all inputs must have the same number
  /// of rows, and a dynamic dim 0) into this many parts, which flow through the graph concurrently.
  /// A count that does not divide the batch gives sizes differing by one, larger first (5 rows in 3:
  /// 2 + 2 + 1); a batch of fewer rows than the count runs one row per micro-batch. Gradients and 0-d
  /// outputs are averaged weighted by each micro-batch's share of the rows, other outputs
  /// concatenated along dim 0, so a loss that is a mean over the rows gives the one-batch result.
  int micro_batches = 1;
  /// Optimizers to run at the end of each step, one actor each; every parameter with a gradient
  /// must belong to one of them. Empty: gradients are only returned.
  std::vector<std::shared_ptr<graph::Optimizer>> optimizers;
  /// Global-norm gradient clipping before the optimizers (0 = off): gradients are scaled by
  /// min(1, clip_grad_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_. Needs gradients.
  double clip_grad_norm = 0;
  /// How the clipping norm is computed; both give the same norm up to summation order. With data
  /// parallelism the parallel mode sums the reduced buckets' norms, the naive one takes one pass
  /// over the reduced gradients.
  ClipMode clip_mode = ClipMode::parallel;
  /// Data parallelism (off unless a communicator is set).
  DataParallel data_parallel;
  /// Tensor parallelism's share of clipping (off unless a communicator is set).
  TensorParallel tensor_parallel;
  /// A pipeline stage's zero-bubble schedule (ZB-H1): the backward's weight gradients (the ops the
  /// gradient of the stage's received input does not need) wait until that gradient has been sent,
  /// so the previous stage gets it as early as the input-gradient chain allows, and the weight
  /// gradients fill this stage's wait for the next micro-batch. Without such a send, no change.
  bool defer_weight_gradients = false;
  /// Pipeline parallelism's share of clipping: the group of the pipeline's stages, each holding
  /// its own layers' gradients, whose squared norms add up to the model's (null: no pipeline).
  std::shared_ptr<transport::Communicator> pipeline_norms;
  /// Dynamic loss scaling (mixed precision): the scaler whose scale_var() the function's backward
  /// was seeded with (TracedFunction::with_gradients). The clip actor then always takes the global
  /// norm, divides the scale out of it and of the gradients (before clipping), and when the norm is
  /// Inf or NaN the optimizers skip the step; afterwards the program updates the scaler. With data
  /// parallelism the norm of the reduced gradients is Inf on every rank as soon as one rank's
  /// gradient was, so all ranks skip the same steps without another collective.
  std::shared_ptr<graph::GradScaler> loss_scaler;
  /// Whether StepResult carries the gradients. A loop that only trains turns it off: the
  /// optimizers then let go of them after the update, and at JIT level 3 their memory is shared
  /// with the next step's instead of kept for the caller.
  bool return_gradients = true;
  /// Which programs lowering gives groups of graph nodes one actor (docs/RUNTIME.md, "Lowering"):
  /// a node that is not a product and reads the actor of the node before it (besides what that
  /// actor reads) runs in its act, and in an inference program with one micro-batch a product does
  /// too. A chain of small ops then pays one message and one hand-over between threads, not one per op. By default only programs without gradients (inference, decoding):
  /// a training step's planned memory is counted per act, and coarser acts hold more of it.
  OpGrouping group_ops = OpGrouping::inference;
  /// Stream-ordered execution (docs/RUNTIME.md, "Streams"): 0 runs each op's kernels in its actor's
  /// handler; N > 0 gives the program N streams of the host (troupe/kernels/stream.hpp), which the op
  /// actors take in turn: an act queues its kernels on its stream and passes the outputs on at
  /// once with an event, a consumer on another stream waits for that event on its stream, and the
  /// sinks, gradient stages and collectives act once their inputs are complete, told by a message.
  /// The same path a GPU's streams take, run on the CPU. Such a program does not plan its step's
  /// memory (JIT level 3): its blocks are freed when the stream is done with them.
  int streams = 0;
};

/// What one step produced.
struct StepResult {
  std::vector<Tensor> outputs;              // the traced function's own outputs
  std::map<std::string, Tensor> gradients;  // by parameter name, row-weighted over micro-batches (clipped when clipping); empty unless return_gradients
  double grad_norm = 0;                     // global gradient norm before clipping (NaN when not clipping), loss scale divided out
  bool skipped = false;                     // loss scaling: a gradient was Inf or NaN, so the optimizers skipped the step
  double loss_scale = 1;                    // loss scaling: the scale this step's backward ran with
  std::vector<double> bucket_squared_norms; // data parallel: each reduced bucket's squared norm
  double comm_ms = 0;     // data parallel: time the communicator spent on this step's collectives (buckets, the loss' mean)
  double exposed_comm_ms = 0;  // of which after backward had finished (not hidden behind compute)
  std::uint64_t comm_bytes = 0;  // data parallel: bytes this rank sent in the step's collectives
  std::uint64_t step = 0;                   // counts from 1 per program
};

/// Called once per step with the result, or with the exception that failed the step.
using StepCallback = std::function<void(StepResult* result, std::exception_ptr error)>;

/// ZeRO-1's optimizer state on one rank (Program::zero_state).
class ZeroState {
 public:
  virtual ~ZeroState() = default;
  /// The state this rank keeps: its slices' of the parameters, keyed "<parameter>[begin:end].<slot>".
  virtual std::map<std::string, Tensor> kept() const = 0;
  /// The whole optimizer's state (keyed as Optimizer::state_dict) from every rank's slices: a
  /// collective of the data-parallel ranks, each calling it between steps.
  virtual std::map<std::string, Tensor> gather() const = 0;
  /// Takes this rank's slices of a whole state (a checkpoint's, saved by any layout), between steps.
  virtual void load(const std::map<std::string, Tensor>& whole) = 0;
};

/// A traced graph lowered to actors; reusable across steps; thread-safe to call.
class Program {
 public:
  virtual ~Program() = default;
  /// Starts a step on `inputs` (in signature order). The callback runs on an actor thread: keep it
  /// short, and do not destroy the program (or its engine) from inside it. Random ops (dropout)
  /// draw at `random`: its first_row is the inputs' row 0 in the step's global batch, and each
  /// micro-batch draws from its own rows on.
  virtual void run_async(std::vector<Tensor> inputs, StepCallback done, const kernels::RandomPosition& random) = 0;
  /// run_async drawing at the zero position (inference, and steps without random ops).
  void run_async(std::vector<Tensor> inputs, StepCallback done) { run_async(std::move(inputs), std::move(done), {}); }
  /// Starts a step and returns a future of its result (a failed step rethrows its troupe::Error).
  std::future<StepResult> run_async(std::vector<Tensor> inputs, const kernels::RandomPosition& random = {});
  /// Runs a step and waits for it.
  StepResult run(std::vector<Tensor> inputs, const kernels::RandomPosition& random = {});
  /// Number of actors the graph was lowered to, by kind ("input", "op", "gradient", "output", "optimizer",
  /// "clip", "bucket", "communicator").
  virtual std::map<std::string, int> actor_counts() const = 0;
  /// JIT level 3: the measured and planned peak of the steps' memory at the shape run last, and
  /// how many plans were built and steps served; empty when the traced function does not plan memory.
  virtual std::optional<graph::MemoryPlanReport> memory_report() const = 0;
  /// With ZeRO-1 (DataParallel::zero), the rank's share of the optimizer state; null otherwise.
  virtual ZeroState* zero_state() const = 0;
  /// With gradient compression (DataParallel::compression not none), its state; null otherwise.
  virtual CompressionState* compression_state() const = 0;
  /// Waits for what the last step still does after answering: with ZeRO-1, the all-gather of the
  /// updated parameters, which overlaps the next step's forward. Call it before reading the
  /// parameters outside the program's steps (evaluating, saving); rethrows the all-gather's failure.
  virtual void settle() const = 0;
};

}  // namespace troupe::actors
