#pragma once
// The vectorised softmax of one dense f32 row, shared by the row kernels that need a softmax or a
// log-sum-exp (softmax, the causal softmax, cross-entropy).

#include <cstdint>

namespace troupe::cpu {

/// y = softmax(x) (or log-softmax with `log`) of a row of n floats, of which only the first `valid`
/// are read and the rest taken as -inf, their y exactly 0 (`valid` < n for the softmax only, not
/// with `log`). The max by selects, the fast exp of x - max (about 2e-7 relative error), the sum in
/// eight float lanes combined in double; a NaN or +Inf score makes the whole row NaN. `next` (or
/// null) is the next row, prefetched meanwhile.
void softmax_row(const float* x, float* y, std::int64_t n, bool log, const float* next, std::int64_t valid);

}  // namespace troupe::cpu
