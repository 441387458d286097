// troupe-demo: a short tour of the kernels layer: tensors and views, the caching allocator,
// counter-based random fills, a GEMM timed against its FLOP count, and activations.
#include <chrono>
#include <cstdio>

#include "troupe/kernels/allocator.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/tensor.hpp"

using namespace troupe;

int main() {
  Generator gen(42);
  Tensor x = Tensor::empty({2, 3});
  gen.uniform_(x, -1, 1);
  Tensor xt = x.transpose(0, 1);
  std::printf("x  = %s, x.T = %s (a view: contiguous=%d, same storage=%d)\n", x.str().c_str(), xt.str().c_str(),
              xt.is_contiguous(), xt.storage() == x.storage());
  auto xv = x.to_vector<float>();
  std::printf("x values:");
  for (float v : xv) std::printf(" %+.4f", v);
  std::printf("\nrelu(x):");
  for (float v : ops::relu(x).to_vector<float>()) std::printf(" %+.4f", v);
  std::printf("\ngelu(x):");
  for (float v : ops::gelu(x).to_vector<float>()) std::printf(" %+.4f", v);
  std::printf("\n");

  const std::int64_t n = 512;
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n});
  gen.normal_(a);
  gen.normal_(b);
  ops::matmul(a, b);  // warm-up
  const int reps = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) ops::matmul(a, b, false, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("matmul %lldx%lld @ %lldx%lld^T: %.2f ms, %.1f GFLOP/s\n", (long long)n, (long long)n, (long long)n,
              (long long)n, s * 1e3, 2.0 * n * n * n / s / 1e9);

  Tensor bias = Tensor::full({n}, 0.5);
  Tensor y = ops::add(ops::matmul(a, b), bias);  // bias broadcasts over rows
  std::printf("(a @ b + 0.5)[0, 0] = %.5f\n", y.slice(0, 0, 1).slice(1, 0, 1).item());

  const AllocatorStats st = cpu_allocator().stats();
  std::printf("allocator: current %zu B, peak %zu B, cached %zu B, %llu requests, %llu system allocations\n",
              st.current_bytes, st.peak_bytes, st.cached_bytes, (unsigned long long)st.requests,
              (unsigned long long)st.system_allocations);
  return 0;
}
