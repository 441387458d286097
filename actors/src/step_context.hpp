#pragma once
// What one step shares between the actors of a program: created once per step by the program
// actor, read by all, never written after it is sent (the bucket buffers' elements excepted:
// each gradient stage writes its own slice).

#include <cstdint>
#include <memory>
#include <vector>

#include "troupe/graph/sym_shape.hpp"
#include "troupe/kernels/dropout.hpp"
#include "troupe/kernels/tensor.hpp"

namespace troupe::actors {

class StepArena;

/// Everything a step shares between its actors.
struct StepContext {
  std::uint64_t step = 0;
  int micro_batches = 1;                     // this step's count: fewer than asked when the batch has fewer rows
  std::vector<std::vector<Tensor>> inputs;   // [micro-batch][graph input]
  std::vector<Tensor> parameters;            // in the order of the graph's parameters
  std::vector<graph::SymBindings> bindings;  // [micro-batch]: symbol sizes (micro-batches may differ in rows)
  std::vector<double> weights;               // [micro-batch]: its share of the batch's rows (they sum to 1)
  std::vector<kernels::RandomPosition> random;  // [micro-batch]: where its random ops draw (first_row: its own rows')
  // Data parallel: one flat buffer per gradient bucket, the program's (kept between steps); a gradient stage
  // writes its finished gradient straight into its slice (PyTorch DDP's gradient-as-bucket-view),
  // so the AllReduce needs no copy.
  std::vector<Tensor> buckets;
  // JIT level 3: the step's planned memory, which every act allocates from (step_memory.hpp); null otherwise.
  std::shared_ptr<StepArena> memory;
};
using StepContextPtr = std::shared_ptr<const StepContext>;

}  // namespace troupe::actors
