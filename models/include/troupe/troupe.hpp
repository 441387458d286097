#pragma once
// Troupe's public API in one include, for services that embed the engine (docs/EMBEDDING.md). What
// it brings in is the stable surface: installed, versioned (troupe/version.hpp) and covered by the
// package test. Headers it does not include (kernel registration, allocator internals, the CUDA and
// NCCL backends) are not installed.
//
//   Tensors        troupe::Tensor, DType, Device, Generator, troupe::Error (kernels/)
//   Layers         graph::Module, Linear, Embedding, LayerNorm, GPTBlock, Sequential, the ops on
//                  graph::Var, custom gradients, safetensors files (graph/)
//   Compiling      graph::trace, TracedFunction (optimized(level), with_gradients, with_amp),
//                  graph::Jit for inference at a JIT level (graph/trace.hpp)
//   Training       actors::Engine compiles a traced function with gradients into an actor program;
//                  Program::run is one step with its optimizers (graph::SGD, AdamW), clipping, loss
//                  scaling and data parallelism over a transport::Communicator (actors/, transport/)
//   Parallel       actors::ParallelTraining: a traced loss trained on a Job's devices (launched
//                  processes, or virtual devices in one process) with one ParallelConfig: dp x tp
//                  x pp (pipeline stages, plan::StagePolicy) or the planner's mesh, ZeRO-1,
//                  buckets, clipping, micro-batches, precision,
//                  strategy files; checkpoints move between layouts (actors/, plan/)
//   Tracing        actors::Tracer writes the message flow as a Chrome trace; trace_summary reads it
//   Models         models::Gpt (with GptDecoder: key/value-cached decoding, rows batched
//                  continuously) and models::SrLite, built from a config or loaded as the
//                  applications save them (load_gpt, load_sr_lite); training checkpoints; the GPT's
//                  placement policy for tensor parallelism (megatron_gpt_policy); GPT-2-family
//                  checkpoints in Hugging Face's layout (load_gpt2) and GPT-2's BPE tokenizer
//                  (Gpt2Tokenizer) (models/)
//
// Thread safety: a Jit, a TracedFunction and a Program may be called from many threads at once (a
// Program runs its steps one after another); a Module, an Optimizer, a GptDecoder, a
// ParallelTraining and an Engine are used from one thread at a time, and an Engine outlives the
// programs it compiled. Errors are troupe::Error, whose kind() says what went wrong.

#include "troupe/version.hpp"

#include "troupe/kernels/device.hpp"
#include "troupe/kernels/dtype.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/tensor.hpp"
#include "troupe/kernels/threading.hpp"

#include "troupe/graph/amp.hpp"
#include "troupe/graph/custom_gradient.hpp"
#include "troupe/graph/debug.hpp"
#include "troupe/graph/dropout.hpp"
#include "troupe/graph/grad_scaler.hpp"
#include "troupe/graph/module.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/graph/ops.hpp"
#include "troupe/graph/optim.hpp"
#include "troupe/graph/pipeline_stage.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/graph/var.hpp"

#include "troupe/transport/bootstrap.hpp"
#include "troupe/transport/inprocess.hpp"
#include "troupe/transport/process_group.hpp"
#include "troupe/transport/transport.hpp"
#include "troupe/transport/ucx.hpp"

#include "troupe/plan/stages.hpp"

#include "troupe/actors/engine.hpp"
#include "troupe/actors/job.hpp"
#include "troupe/actors/parallel_training.hpp"
#include "troupe/actors/program.hpp"
#include "troupe/actors/trace_summary.hpp"
#include "troupe/actors/tracer.hpp"

#include "troupe/models/checkpoint.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/gpt_decoder.hpp"
#include "troupe/models/gpt_placement.hpp"
#include "troupe/models/gpt2.hpp"
#include "troupe/models/gpt2_tokenizer.hpp"
#include "troupe/models/saved.hpp"
#include "troupe/models/sr_lite.hpp"
