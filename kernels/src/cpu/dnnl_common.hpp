#pragma once
// What every oneDNN primitive call of the CPU kernels shares: the engine, the OpenMP thread count
// per call, and the buffers a call needs besides the user's, taken from Troupe's allocator.

#include <memory>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "troupe/kernels/dtype.hpp"
#include "troupe/kernels/storage.hpp"

namespace troupe::cpu {

/// oneDNN's name for `t` (f32, bf16, f16; anything else maps to f32, which callers never pass).
dnnl::memory::data_type dnnl_type(DType t);

/// Below this many multiply-adds a GEMM runs on one thread: starting a team costs more than it
/// saves (attention's 64x64x64 tiles ran 10% slower on two threads). OpenBLAS's own cut-off.
inline constexpr long long kParallelGemmMacs = 1LL << 18;

/// The one CPU engine of the process.
dnnl::engine& cpu_engine();

/// oneDNN runs on OpenMP, whose thread count is per calling thread: an actor's scheduler thread
/// would otherwise start a team of all cores on each call and oversubscribe the machine. Sets it
/// to kernel_threads(), or to one thread for a call of fewer than `macs` multiply-adds when
/// `macs` is given (starting a team costs more than it saves there). Returns the count it set.
int limit_threads_here(long long macs = -1);

/// The buffers one primitive call needs besides the user's (reordered copies, oneDNN's scratchpad),
/// taken from Troupe's allocator: cached across calls, and planned with the step at JIT level 3.
/// Left to oneDNN they come from malloc, whose large blocks may be unmapped at each free and
/// faulted in again at the next call (a third of sr-lite's inference time on two threads).
class CallBuffers {
 public:
  /// A memory of layout `md` over a new buffer that lives as long as this object.
  dnnl::memory make(const dnnl::memory::desc& md);

 private:
  std::vector<std::shared_ptr<Storage>> held_;
};

/// Primitive attributes whose scratchpad is the caller's to give (execute_with_scratchpad).
dnnl::primitive_attr user_scratchpad_attributes();

/// Runs `primitive` with `args` and the scratchpad its descriptor asks for.
template <class Pd>
void execute_with_scratchpad(const dnnl::primitive& primitive, const Pd& pd,
                             std::unordered_map<int, dnnl::memory> args, dnnl::stream& stream, CallBuffers& buffers) {
  if (pd.scratchpad_desc().get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, buffers.make(pd.scratchpad_desc()));
  primitive.execute(stream, args);
}

}  // namespace troupe::cpu
