// The thread counts of the CPU kernels: the BLAS libraries' (OpenBLAS, and oneDNN through OpenMP) and
// the size of the pool of cores the other kernels share (cpu/parallel.hpp). CPU-only, so they have
// no front end and no registry entry.
#include "troupe/kernels/threading.hpp"

#include <cblas.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "troupe/kernels/error.hpp"

extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace troupe {

namespace {
std::atomic<int> threads{0};
std::atomic<int> cores{0};

// The CPUs this process may run on (its affinity mask, as taskset or a container sets it).
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

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

void set_parallel_cores(int n) {
  TROUPE_CHECK(n >= 1, invalid_argument, "set_parallel_cores: need at least 1 core, got ", n);
  cores = n;
}

int parallel_cores() {
  const int n = cores.load();
  if (n > 0) return n;
  static const int available = available_cores();
  return available;
}

}  // namespace troupe
