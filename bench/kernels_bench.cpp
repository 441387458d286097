// Kernel benchmarks: one JSON line per measurement on stdout.
//  - matmul: Troupe's kernels::matmul next to the same OpenBLAS sgemm called directly (ratio = ours /
//    direct) and oneDNN's sgemm (the alternative backend), 1 and 2 threads;
//  - matmul-bf16: bf16 operands written as f32 (mixed precision's GEMMs) next to f32 at gpt-mini's
//    Linear shapes, and the cast of the left operand;
//  - matmul-cores: the same work as one 2-thread GEMM at a time vs two 1-thread GEMMs on two threads
//    (how kernels should use the cores under the actor runtime);
//  - conv2d 1x64x128x128, 64->64, 3x3: forward, backward-data, backward-weight;
//  - layernorm and softmax effective GB/s next to a memcpy of the same bytes;
//  - the AdamW update over gpt-mini's 3.3 M parameters: GB/s next to memcpy;
//  - a fused elementwise chain next to the unfused kernels (r + gelu(x * s + b)), and memcpy;
//  - causal attention at gpt-mini's size: the fused kernel next to the unfused kernels it replaces
//    (matmul, scale, mask, softmax, matmul), forward and backward, and the bytes of scores each holds;
//    these four on one core;
//  - causal-softmax: the fused causal softmax of bf16 scores next to the chain it replaces, forward
//    and backward; elementwise-dtype: gelu, add and bias-then-gelu in f32 and bf16; head-products:
//    attention's bf16 head products on permuted views and on dense heads; all on one core;
//  - pool: each kernel that splits into tiles, on one core and on every core of the pool.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/conv.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/elementwise_chain.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/cpu_features.hpp"
#include "troupe/kernels/matmul.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/kernels/softmax.hpp"
#include "troupe/kernels/threading.hpp"

using namespace troupe;

namespace {

using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median seconds of each function, measured alternately (one call of each per round) so that
// machine noise hits all of them alike.
std::vector<double> median_alternating(const std::vector<std::function<void()>>& fs, int rounds) {
  for (const auto& f : fs) f();  // warm-up
  std::vector<std::vector<double>> t(fs.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < fs.size(); ++i) t[i].push_back(seconds(fs[i]));
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

std::string env_label() {
  const char* e = std::getenv("TROUPE_BENCH_ENV");
  return e ? e : "default";
}

std::string context() {
  return std::string("\"isa\":\"") + kernels::cpu_isa() + "\",\"openblas_env\":\"" + env_label() + "\",\"openblas_core\":\"" +
         openblas_get_corename() + "\"";
}

Tensor randn(const Shape& s, std::uint64_t seed) {
  Tensor t = Tensor::empty(s);
  Generator(seed).normal_(t);
  return t;
}

void bench_matmul() {
  for (int threads : {1, 2}) {
    set_kernel_threads(threads);
    for (std::int64_t n : {128, 256, 512, 1024, 2048}) {
      Tensor a = randn({n, n}, 1), b = randn({n, n}, 2);
      Tensor c = Tensor::empty({n, n});
      const int in = static_cast<int>(n);
      const float* ap = a.data<float>();
      const float* bp = b.data<float>();
      float* cp = c.data<float>();
      const int rounds = n >= 1024 ? 5 : 15;
      // Ours (oneDNN's sgemm) alternates with the same oneDNN call made directly; OpenBLAS is timed
      // in a block of its own: its pthreads and OpenMP's spin while the other library computes, so
      // alternating the two libraries measures their contention, not either of them.
      const auto t = median_alternating(
          {[&] { kernels::matmul(a, b); }, [&] { dnnl_sgemm('N', 'N', n, n, n, 1.f, ap, n, bp, n, 0.f, cp, n); }},
          rounds);
      const auto blas = median_alternating(
          {[&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, in, in, in, 1.f, ap, in, bp, in, 0.f, cp, in); }},
          rounds);
      const double flop = 2.0 * n * n * n;
      std::printf(
          "{\"bench\":\"matmul\",\"n\":%lld,\"threads\":%d,\"gflops\":%.1f,\"onednn_gflops\":%.1f,\"ratio\":%.3f,"
          "\"openblas_gflops\":%.1f,%s}\n",
          static_cast<long long>(n), threads, flop / t[0] / 1e9, flop / t[1] / 1e9, t[1] / t[0], flop / blas[0] / 1e9,
          context().c_str());
      std::fflush(stdout);
    }
  }
}

// Mixed precision's GEMMs: bf16 operands accumulated and written in f32, next to the f32 product,
// alternating, at gpt-mini's shapes (rows x in -> out of its Linear layers, over 1024 tokens).
void bench_matmul_bf16() {
  const std::int64_t shapes[][3] = {{1024, 256, 768}, {1024, 256, 1024}, {1024, 1024, 256}, {2048, 2048, 2048}};
  for (int threads : {1, 2}) {
    set_kernel_threads(threads);
    for (const auto& s : shapes) {
      const Tensor a = randn({s[0], s[1]}, 1), b = randn({s[1], s[2]}, 2);
      const Tensor al = a.to(DType::bf16), bl = b.to(DType::bf16);
      const auto t = median_alternating(
          {[&] { kernels::matmul(a, b); }, [&] { kernels::matmul(al, bl, false, false, DType::f32); },
           [&] { a.to(DType::bf16); }},
          s[0] >= 2048 ? 5 : 15);
      const double flop = 2.0 * s[0] * s[1] * s[2];
      std::printf(
          "{\"bench\":\"matmul-bf16\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"threads\":%d,\"f32_gflops\":%.1f,"
          "\"bf16_gflops\":%.1f,\"speedup\":%.2f,\"cast_a_ms\":%.3f,%s}\n",
          static_cast<long long>(s[0]), static_cast<long long>(s[1]), static_cast<long long>(s[2]), threads,
          flop / t[0] / 1e9, flop / t[1] / 1e9, t[0] / t[1], t[2] * 1e3, context().c_str());
      std::fflush(stdout);
    }
  }
}

void bench_cores() {
  const std::int64_t n = 1024;
  const int per_worker = 4;
  std::vector<Tensor> as, bs;
  for (int i = 0; i < 2 * per_worker; ++i) as.push_back(randn({n, n}, 10 + i)), bs.push_back(randn({n, n}, 30 + i));
  auto run_range = [&](int begin, int end) {
    for (int i = begin; i < end; ++i) kernels::matmul(as[i], bs[i]);
  };
  const auto t = median_alternating(
      {[&] {
         set_kernel_threads(2);
         run_range(0, 2 * per_worker);
       },
       [&] {
         set_kernel_threads(1);
         std::thread w([&] { run_range(0, per_worker); });
         run_range(per_worker, 2 * per_worker);
         w.join();
       }},
      5);
  const double flop = 2.0 * n * n * n * 2 * per_worker;
  std::printf("{\"bench\":\"matmul-cores\",\"n\":1024,\"mode\":\"one-gemm-2-threads\",\"gflops\":%.1f,%s}\n",
              flop / t[0] / 1e9, context().c_str());
  std::printf("{\"bench\":\"matmul-cores\",\"n\":1024,\"mode\":\"two-gemms-1-thread-each\",\"gflops\":%.1f,%s}\n",
              flop / t[1] / 1e9, context().c_str());
  std::fflush(stdout);
}

void bench_conv() {
  for (int threads : {1, 2}) {
    set_kernel_threads(threads);
    Tensor x = randn({1, 64, 128, 128}, 3), w = randn({64, 64, 3, 3}, 4), bias = randn({64}, 5);
    kernels::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    Tensor y = kernels::conv2d(x, w, bias, p);
    Tensor g = randn(y.shape(), 6);
    const auto t = median_alternating({[&] { kernels::conv2d(x, w, bias, p); },
                                       [&] { kernels::conv2d_backward_data(g, w, x.shape(), p); },
                                       [&] { kernels::conv2d_backward_weight(g, x, w.shape(), p); }},
                                      5);
    const double gflop = 2.0 * 64 * 64 * 9 * 128 * 128 / 1e9;
    std::printf(
        "{\"bench\":\"conv2d\",\"shape\":\"1x64x128x128,64->64,3x3\",\"threads\":%d,\"forward_ms\":%.2f,"
        "\"backward_data_ms\":%.2f,\"backward_weight_ms\":%.2f,\"forward_gflops\":%.1f,%s}\n",
        threads, t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, gflop / t[0], context().c_str());
    std::fflush(stdout);
  }
}

void bench_bandwidth() {
  set_kernel_threads(1);
  set_parallel_cores(1);  // one core, as these lines have always measured (the pool: bench_pool)
  const std::int64_t rows = 4096, cols = 1024;
  Tensor x = randn({rows, cols}, 7), gamma = randn({cols}, 8), beta = randn({cols}, 9);
  Tensor dst = Tensor::empty({rows, cols});
  const double bytes = 2.0 * rows * cols * 4;  // one read and one write of the tensor
  const auto t = median_alternating({[&] { kernels::layernorm(x, gamma, beta); }, [&] { kernels::softmax(x, -1); },
                                     [&] { std::memcpy(dst.raw_data(), x.raw_data(), x.nbytes()); }},
                                    11);
  std::printf(
      "{\"bench\":\"layernorm\",\"shape\":\"4096x1024\",\"gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f,%s}\n",
      bytes / t[0] / 1e9, bytes / t[2] / 1e9, t[2] / t[0], context().c_str());
  std::printf("{\"bench\":\"softmax\",\"shape\":\"4096x1024\",\"gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f,%s}\n",
              bytes / t[1] / 1e9, bytes / t[2] / 1e9, t[2] / t[1], context().c_str());
  // The backward passes read two tensors and write one: 1.5 times the bytes of the forward.
  const auto ln = kernels::layernorm(x, gamma, beta);
  const Tensor y = kernels::softmax(x, -1), dy = randn({rows, cols}, 10);
  const auto tb = median_alternating(
      {[&] { kernels::layernorm_backward(dy, x, gamma, ln.mean, ln.rstd); }, [&] { kernels::softmax_backward(dy, y, -1); },
       [&] { std::memcpy(dst.raw_data(), x.raw_data(), x.nbytes()); }},
      11);
  const double gbps_copy = bytes / tb[2] / 1e9, bytes_back = 1.5 * bytes;
  for (int k = 0; k < 2; ++k)
    std::printf("{\"bench\":\"%s\",\"shape\":\"4096x1024\",\"gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f,%s}\n",
                k == 0 ? "layernorm_backward" : "softmax_backward", bytes_back / tb[k] / 1e9, gbps_copy,
                bytes_back / tb[k] / 1e9 / gbps_copy, context().c_str());
  std::fflush(stdout);
}

// AdamW over one flat buffer of gpt-mini's parameter count: it reads parameter, gradient and both
// moments and writes three of them, 7 x 4 bytes an element, all in the step's serial tail.
void bench_adamw() {
  set_kernel_threads(1);
  set_parallel_cores(1);  // one core, as these lines have always measured (the pool: bench_pool)
  const std::int64_t n = 3323392;
  Tensor p = randn({n}, 1), g = randn({n}, 2), m = Tensor::full({n}, 0.001f), v = Tensor::full({n}, 0.01f);
  Tensor dst = Tensor::empty({n});
  kernels::AdamWParams hp;
  hp.lr = 3e-4;
  hp.weight_decay = 0.01;
  std::int64_t step = 1;
  const auto t = median_alternating({[&] { kernels::adamw_update_(p, g, m, v, hp, step++); },
                                     [&] { std::memcpy(dst.raw_data(), p.raw_data(), p.nbytes()); }},
                                    11);
  const double bytes = 7.0 * n * 4, copy = 2.0 * n * 4;
  std::printf("{\"bench\":\"adamw\",\"params\":%lld,\"ms\":%.3f,\"gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f,%s}\n",
              static_cast<long long>(n), t[0] * 1e3, bytes / t[0] / 1e9, copy / t[1] / 1e9, bytes / t[0] / (copy / t[1]),
              context().c_str());
  std::fflush(stdout);
}

// A fused elementwise chain next to the unfused kernels it replaces: r + gelu(x * s + b), a scale
// and shift over the last dim, an activation and a residual add, over 4096 x 1024 floats (beyond
// the caches). Unfused, each op reads and writes the whole tensor; fused, only x, r and the result
// move, so the chain's GB/s (those three tensors) is set against memcpy's.
void bench_chain() {
  set_kernel_threads(1);
  set_parallel_cores(1);  // one core, as these lines have always measured (the pool: bench_pool)
  const std::int64_t rows = 4096, cols = 1024;
  const Tensor x = randn({rows, cols}, 20), r = randn({rows, cols}, 21), sc = randn({cols}, 22), b = randn({cols}, 23);
  Tensor dst = Tensor::empty({rows, cols});
  using kernels::ChainOp;
  const std::vector<kernels::ChainStep> steps{{ChainOp::mul, 0, 1, 0.0},
                                              {ChainOp::add, 4, 2, 0.0},
                                              {ChainOp::gelu, 5, -1, 0.0},
                                              {ChainOp::add, 3, 6, 0.0}};
  const auto t = median_alternating(
      {[&] { kernels::elementwise_chain({x, sc, b, r}, steps); },
       [&] { kernels::add(r, kernels::gelu(kernels::add(kernels::mul(x, sc), b))); },
       [&] { std::memcpy(dst.raw_data(), x.raw_data(), x.nbytes()); }},
      11);
  const double bytes = 3.0 * x.nbytes(), copy = 2.0 * x.nbytes();
  std::printf("{\"bench\":\"elementwise-chain\",\"shape\":\"4096x1024\",\"steps\":4,\"fused_ms\":%.3f,"
              "\"unfused_ms\":%.3f,\"speedup\":%.2f,\"fused_gbps\":%.1f,\"memcpy_gbps\":%.1f,\"ratio\":%.3f,%s}\n",
              t[0] * 1e3, t[1] * 1e3, t[1] / t[0], bytes / t[0] / 1e9, copy / t[2] / 1e9, bytes / t[0] / (copy / t[2]),
              context().c_str());
  std::fflush(stdout);
}

// The causal softmax of gpt-mini's O2 attention scores (bf16, 8 x 4 heads x 128 x 128), one core:
// the fused kernel against the chain level 3 replaces (scale in bf16, up to f32, mask, softmax,
// down to bf16; the backward: up, softmax_backward, mask, down, scale), forward and backward.
void bench_causal_softmax() {
  set_kernel_threads(1);
  set_parallel_cores(1);
  const double scale = 0.125, inf = std::numeric_limits<double>::infinity();
  const Tensor x = randn({8, 4, 128, 128}, 30).to(DType::bf16), dy = randn({8, 4, 128, 128}, 31).to(DType::bf16);
  const Tensor y = kernels::causal_softmax(x, scale), y32 = y.to(DType::f32);
  const auto t = median_alternating(
      {[&] { kernels::causal_softmax(x, scale); },
       [&] { kernels::softmax(kernels::causal_mask(kernels::mul(x, scale).to(DType::f32), -inf), -1).to(DType::bf16); },
       [&] { kernels::causal_softmax_backward(dy, y, scale); },
       [&] {
         kernels::mul(kernels::causal_mask(kernels::softmax_backward(dy.to(DType::f32), y32, -1), 0.0).to(DType::bf16), scale);
       }},
      21);
  for (int k = 0; k < 2; ++k)
    std::printf("{\"bench\":\"causal-softmax%s\",\"shape\":\"8x4x128x128\",\"dtype\":\"bf16\",\"fused_ms\":%.3f,"
                "\"chain_ms\":%.3f,\"speedup\":%.2f,%s}\n",
                k ? "-backward" : "", t[2 * k] * 1e3, t[2 * k + 1] * 1e3, t[2 * k + 1] / t[2 * k], context().c_str());
  std::fflush(stdout);
}

// Elementwise kernels in f32 and bf16 over 1M elements, one core: what widening each tile to f32
// and rounding it back costs against the halved memory traffic (gelu, add, bias_gelu as O2 runs them).
void bench_elementwise_dtypes() {
  set_kernel_threads(1);
  set_parallel_cores(1);
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor h = randn({1024, 1024}, 40).to(dt), r = randn({1024, 1024}, 41).to(dt), b = randn({1024}, 42).to(dt);
    const auto t = median_alternating({[&] { kernels::gelu(h); }, [&] { kernels::add(h, r); },
                                       [&] { kernels::gelu(kernels::add(h, b)); }},
                                      21);
    std::printf("{\"bench\":\"elementwise-dtype\",\"shape\":\"1024x1024\",\"dtype\":\"%s\",\"gelu_ms\":%.3f,"
                "\"add_ms\":%.3f,\"add_bias_then_gelu_ms\":%.3f,%s}\n",
                dtype_name(dt), t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, context().c_str());
  }
  std::fflush(stdout);
}

// Attention's head products in bf16, one core: q k^T and p v on permuted views of one qkv product
// (as the graph hands them over: k^T's batch does not fold, so the kernel copies it) against the
// same products on dense heads.
void bench_head_products() {
  set_kernel_threads(1);
  set_parallel_cores(1);
  const Tensor qkv = randn({8, 128, 768}, 43).to(DType::bf16);
  const auto head = [&](std::int64_t at) { return qkv.slice(2, at, at + 256).reshape({8, 128, 4, 64}).permute({0, 2, 1, 3}); };
  const Tensor q = head(0), k = head(256), v = head(512), qd = q.contiguous(), kd = k.contiguous(), vd = v.contiguous();
  const Tensor p = randn({8, 4, 128, 128}, 44).to(DType::bf16);
  const auto t = median_alternating({[&] { kernels::matmul(q, k, false, true); }, [&] { kernels::matmul(qd, kd, false, true); },
                                     [&] { kernels::matmul(p, v); }, [&] { kernels::matmul(p, vd); }},
                                    21);
  std::printf("{\"bench\":\"head-products\",\"shape\":\"8x4x128x64\",\"dtype\":\"bf16\",\"qk_views_ms\":%.3f,"
              "\"qk_dense_ms\":%.3f,\"pv_views_ms\":%.3f,\"pv_dense_ms\":%.3f,%s}\n",
              t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, t[3] * 1e3, context().c_str());
  std::fflush(stdout);
}

// The unfused attention's forward, keeping what its backward reads (the probabilities).
struct UnfusedAttention {
  Tensor p, y;
};
UnfusedAttention unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const Tensor p = kernels::softmax(kernels::causal_mask(kernels::mul(kernels::matmul(q, k, false, true), scale),
                                                         -std::numeric_limits<double>::infinity()),
                                    -1);
  return {p, kernels::matmul(p, v)};
}
// Its backward, as autodiff would run it: dv = p^T dy, dp = dy v^T, ds = softmax_backward, dq, dk.
void unfused_attention_backward(const UnfusedAttention& f, const Tensor& dy, const Tensor& q, const Tensor& k,
                                const Tensor& v, double scale) {
  kernels::matmul(f.p, dy, true, false);
  const Tensor dp = kernels::matmul(dy, v, false, true);
  const Tensor ds = kernels::mul(kernels::causal_mask(kernels::softmax_backward(dp, f.p, -1), 0.0), scale);
  kernels::matmul(ds, k);
  kernels::matmul(ds, q, true, false);
}

void bench_attention() {
  set_kernel_threads(1);
  set_parallel_cores(1);  // one core, as these lines have always measured (the pool: bench_pool)
  const std::int64_t b = 8, h = 4, t = 128, d = 64;  // gpt-mini: batch 8, 4 heads of 64, 128 positions
  const double scale = 1.0 / 8.0;
  const Tensor q = randn({b, h, t, d}, 10), k = randn({b, h, t, d}, 11), v = randn({b, h, t, d}, 12),
               dy = randn({b, h, t, d}, 13);
  const auto fused = kernels::causal_attention(q, k, v, scale);
  const auto plain = unfused_attention(q, k, v, scale);
  const auto ms = median_alternating(
      {[&] { kernels::causal_attention(q, k, v, scale); }, [&] { unfused_attention(q, k, v, scale); },
       [&] { kernels::causal_attention_backward(dy, q, k, v, fused.y, fused.lse, scale); },
       [&] { unfused_attention_backward(plain, dy, q, k, v, scale); }},
      11);
  std::printf(
      "{\"bench\":\"causal-attention\",\"shape\":\"8x4x128x64\",\"fused_forward_ms\":%.3f,\"unfused_forward_ms\":%.3f,"
      "\"fused_backward_ms\":%.3f,\"unfused_backward_ms\":%.3f,\"speedup_forward\":%.2f,\"speedup_backward\":%.2f,"
      "\"fused_saved_bytes\":%lld,\"unfused_saved_bytes\":%lld,%s}\n",
      ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3, ms[3] * 1e3, ms[1] / ms[0], ms[3] / ms[2],
      static_cast<long long>(fused.lse.nbytes()), static_cast<long long>(plain.p.nbytes()), context().c_str());
  std::fflush(stdout);
}

// The pool of cores: each tiled kernel at gpt-mini's step sizes (batch 8 x 128 positions, d 256,
// MLP 1024, 4 heads of 64, vocabulary 256) on its caller's core alone and on every core, alternately.
void bench_pool() {
  set_kernel_threads(1);
  const int cores = parallel_cores();
  const Tensor h = randn({1024, 1024}, 30).to(DType::bf16), bias = randn({1024}, 31).to(DType::bf16);
  const Tensor dh = randn({1024, 1024}, 32).to(DType::bf16), wide = randn({1024, 1024}, 33);
  const Tensor x = randn({1024, 256}, 34), r = randn({1024, 256}, 35), gamma = randn({256}, 36), beta = randn({256}, 37);
  const Tensor dx = randn({1024, 256}, 38), scores = randn({4096, 128}, 39), ds = randn({4096, 128}, 40);
  const Tensor logits = randn({1024, 256}, 41), targets = Tensor::zeros({1024}, DType::i64);
  const Tensor one = Tensor::full({}, 1.0);
  const std::int64_t n = 3323392;
  Tensor p = randn({n}, 42), g = randn({n}, 43), m = Tensor::full({n}, 0.001f), v = Tensor::full({n}, 0.01f);
  const Tensor q = randn({8, 4, 128, 64}, 44), k = randn({8, 4, 128, 64}, 45), vv = randn({8, 4, 128, 64}, 46);
  const auto ln = kernels::add_layernorm(x, r, gamma, beta);
  const auto att = kernels::causal_attention(q, k, vv, 0.125);
  const Tensor y = kernels::softmax(scores, -1);
  kernels::AdamWParams hp;
  std::int64_t step = 1;
  struct Case {
    const char* kernel;
    const char* shape;
    const char* dtype;
    std::function<void()> run;
  };
  const std::vector<Case> cases{
      {"bias_gelu", "1024x1024", "bf16", [&] { kernels::gelu(kernels::add(h, bias)); }},
      {"gelu_backward", "1024x1024", "bf16", [&] { kernels::unary_backward(kernels::UnaryOp::gelu, dh, h); }},
      {"cast", "1024x1024", "f32->bf16", [&] { wide.to(DType::bf16); }},
      {"column_sum", "1024x1024->1024", "bf16", [&] { kernels::sum(dh, {0}); }},
      {"add_layernorm", "1024x256", "f32", [&] { kernels::add_layernorm(x, r, gamma, beta); }},
      {"layernorm_backward", "1024x256", "f32",
       [&] { kernels::layernorm_backward(dx, ln.sum, gamma, ln.mean, ln.rstd); }},
      {"softmax", "4096x128", "f32", [&] { kernels::softmax(scores, -1); }},
      {"softmax_backward", "4096x128", "f32", [&] { kernels::softmax_backward(ds, y, -1); }},
      {"cross_entropy", "1024x256", "f32",
       [&] { kernels::cross_entropy_backward(one, logits, targets), kernels::cross_entropy(logits, targets); }},
      {"adamw", "3323392", "f32", [&] { kernels::adamw_update_(p, g, m, v, hp, step++); }},
      {"causal_attention", "8x4x128x64", "f32", [&] { kernels::causal_attention(q, k, vv, 0.125); }},
      {"causal_attention_backward", "8x4x128x64", "f32",
       [&] { kernels::causal_attention_backward(q, q, k, vv, att.y, att.lse, 0.125); }},
  };
  for (const Case& c : cases) {
    const auto t = median_alternating({[&] {
                                         set_parallel_cores(1);
                                         c.run();
                                       },
                                       [&] {
                                         set_parallel_cores(cores);
                                         c.run();
                                       }},
                                      21);
    std::printf("{\"bench\":\"pool\",\"kernel\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"cores\":%d,"
                "\"one_core_ms\":%.3f,\"pool_ms\":%.3f,\"speedup\":%.2f,%s}\n",
                c.kernel, c.shape, c.dtype, cores, t[0] * 1e3, t[1] * 1e3, t[0] / t[1], context().c_str());
    std::fflush(stdout);
  }
  set_parallel_cores(cores);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  if (only.empty() || only == "matmul") bench_matmul();
  if (only.empty() || only == "matmul-bf16") bench_matmul_bf16();
  if (only.empty() || only == "cores") bench_cores();
  if (only.empty() || only == "conv2d") bench_conv();
  if (only.empty() || only == "bandwidth") bench_bandwidth();
  if (only.empty() || only == "attention") bench_attention();
  if (only.empty() || only == "causal-softmax") bench_causal_softmax();
  if (only.empty() || only == "elementwise-dtype") bench_elementwise_dtypes();
  if (only.empty() || only == "head-products") bench_head_products();
  if (only.empty() || only == "adamw") bench_adamw();
  if (only.empty() || only == "chain") bench_chain();
  if (only.empty() || only == "pool") bench_pool();
  return 0;
}
