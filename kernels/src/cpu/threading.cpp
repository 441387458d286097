// The thread count of the CPU BLAS libraries (OpenBLAS, and oneDNN through OpenMP): CPU-only, so
// it has no front end and no registry entry.
#include "troupe/kernels/threading.hpp"

#include <cblas.h>

#include <atomic>

#include "troupe/kernels/error.hpp"

extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace troupe {

namespace {
std::atomic<int> threads{0};
}

void set_kernel_threads(int n) {
  TROUPE_CHECK(n >= 1, invalid_argument, "set_kernel_threads: need at least 1 thread, got ", n);
  openblas_set_num_threads(n);
  // oneDNN in Debian runs on OpenMP; its thread count is the OpenMP one.
  if (omp_set_num_threads) omp_set_num_threads(n);
  threads = n;
}

int kernel_threads() {
  const int n = threads.load();
  return n > 0 ? n : openblas_get_num_threads();
}

}  // namespace troupe
