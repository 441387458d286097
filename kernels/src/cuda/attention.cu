// CUDA fused causal attention, y = softmax(mask(scale q k^T)) v, forward and backward, as
// src/cpu/attention.cpp computes it: q, k, v dense [N, T, D], an online softmax per query row (a
// running maximum and sum, the output rescaled when the maximum grows), each row's log-sum-exp
// saved for the backward, which recomputes the probabilities; the T x T scores never exist in
// memory. A warp works on one row, each lane holding D / 32 of its D values, and the warps of a
// block share tiles of 32 keys (and values) staged in shared memory. The backward runs as
// FlashAttention-2's three parts without atomics: delta = dy . y per query row; dq per query row
// over its keys; dk and dv per key row over its queries, so every sum has one order and the same
// bits on every run. bf16 and f16 compute in f32 (lse f32), f64 in double. Dropout inside the
// fused kernel is CPU-only for now.
#include <math_constants.h>

#include "cuda/element_types.cuh"
#include "cuda/strided.cuh"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::load;
using cuda::store;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;                    // warps per block: rows sharing a tile
constexpr int kTileKeys = 32;                       // keys (or queries) per shared tile
constexpr int kMaxHeadDim = 256;                    // D values per row, kMaxHeadDim / 32 per lane
constexpr int kPerLane = kMaxHeadDim / kWarp;

template <class C>
__device__ inline C warp_sum(C v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The lane's D / 32 values of row `row` (element d = lane + 32 e) as C.
template <class T, class C>
__device__ inline void load_row(const T* row, long long d_len, C (&out)[kPerLane]) {
  for (int e = 0; e < kPerLane; ++e) {
    const long long d = threadIdx.x % kWarp + kWarp * e;
    out[e] = d < d_len ? load<C>(row[d]) : C(0);
  }
}

// The dot product of the lane's values with row `r` of a shared tile [kTileKeys, D].
template <class C>
__device__ inline C dot_tile(const C (&mine)[kPerLane], const C* tile, int r, long long d_len) {
  C s = 0;
  for (int e = 0; e < kPerLane; ++e) {
    const long long d = threadIdx.x % kWarp + kWarp * e;
    if (d < d_len) s += mine[e] * tile[r * d_len + d];
  }
  return warp_sum(s);
}

// Stages rows [first, first + kTileKeys) of a [T, D] head (up to row `last`) into `tile` as C.
template <class T, class C>
__device__ inline void stage(const T* head, long long first, long long last, long long d_len, C* tile) {
  for (long long e = threadIdx.x; e < kTileKeys * d_len; e += blockDim.x) {
    const long long r = first + e / d_len;
    tile[e] = r <= last ? load<C>(head[r * d_len + e % d_len]) : C(0);
  }
}

// The rows a block works on: kRowsPerBlock consecutive rows (queries, or keys) of head blockIdx.y,
// one per warp, and the two shared tiles of kTileKeys rows each (dynamic shared memory).
template <class C>
struct BlockRows {
  long long head, first, row, base, last;
  bool active;  // this warp has a row (the head's last block may have fewer)
  C *tile_a, *tile_b;
  __device__ BlockRows(unsigned char* shared, long long t_len, long long d_len)
      : head(blockIdx.y),
        first(static_cast<long long>(blockIdx.x) * kRowsPerBlock),
        row(first + threadIdx.x / kWarp),
        base(head * t_len * d_len),
        last(min(t_len - 1, first + kRowsPerBlock - 1)),
        active(row < t_len),
        tile_a(reinterpret_cast<C*>(shared)),
        tile_b(tile_a + kTileKeys * d_len) {}
  /// The warp's row of a [T, D] head tensor (row 0 for a warp without one).
  template <class T>
  __device__ const T* of(const T* tensor, long long d_len) const {
    return tensor + base + (active ? row : 0) * d_len;
  }
};

// Writes the lane's D / 32 values of a row.
template <class T, class C>
__device__ inline void store_row(T* row, const C (&values)[kPerLane], long long d_len) {
  for (int e = 0; e < kPerLane; ++e) {
    const long long d = threadIdx.x % kWarp + kWarp * e;
    if (d < d_len) row[d] = store<T>(values[e]);
  }
}

// One block: kRowsPerBlock query rows of head blockIdx.y; y and the rows' log-sum-exp.
template <class T, class C>
__global__ void attention_forward(const T* q, const T* k, const T* v, T* y, C* lse, long long t_len, long long d_len,
                                  C scale) {
  extern __shared__ unsigned char shared[];
  const BlockRows<C> b(shared, t_len, d_len);
  C* k_tile = b.tile_a;
  C* v_tile = b.tile_b;
  C mine[kPerLane], acc[kPerLane] = {};
  load_row(b.of(q, d_len), d_len, mine);
  C m = -CUDART_INF_F, l = 0;
  for (long long j0 = 0; j0 <= b.last; j0 += kTileKeys) {
    __syncthreads();
    stage(k + b.base, j0, b.last, d_len, k_tile);
    stage(v + b.base, j0, b.last, d_len, v_tile);
    __syncthreads();
    for (int jj = 0; jj < kTileKeys && b.active && j0 + jj <= b.row; ++jj) {
      const C s = scale * dot_tile(mine, k_tile, jj, d_len);
      const C m_new = fmax(m, s), correction = exp(m - m_new), p = exp(s - m_new);
      l = l * correction + p;
      for (int e = 0; e < kPerLane; ++e) {
        const long long d = threadIdx.x % kWarp + kWarp * e;
        acc[e] = acc[e] * correction + (d < d_len ? p * v_tile[jj * d_len + d] : C(0));
      }
      m = m_new;
    }
  }
  if (!b.active) return;
  for (C& a : acc) a /= l;
  store_row(y + b.base + b.row * d_len, acc, d_len);
  if (threadIdx.x % kWarp == 0) lse[b.head * t_len + b.row] = m + log(l);
}

// delta[row] = dy[row] . y[row], a warp per row.
template <class T, class C>
__global__ void attention_delta(const T* dy, const T* y, C* delta, long long rows, long long d_len) {
  const long long row = static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  C s = 0;
  for (long long d = threadIdx.x % kWarp; d < d_len; d += kWarp) s += load<C>(dy[row * d_len + d]) * load<C>(y[row * d_len + d]);
  s = warp_sum(s);
  if (threadIdx.x % kWarp == 0) delta[row] = s;
}

// dq[i] = sum over keys j <= i of ds_ij k_j, ds = scale p (dy_i . v_j - delta_i), p = exp(scale
// q_i . k_j - lse_i): a warp per query row, the block's keys and values staged in tiles.
template <class T, class C>
__global__ void attention_dq(const T* dy, const T* q, const T* k, const T* v, const C* lse, const C* delta, T* dq,
                             long long t_len, long long d_len, C scale) {
  extern __shared__ unsigned char shared[];
  const BlockRows<C> b(shared, t_len, d_len);
  C* k_tile = b.tile_a;
  C* v_tile = b.tile_b;
  const long long at = b.head * t_len + (b.active ? b.row : 0);
  C q_row[kPerLane], dy_row[kPerLane], acc[kPerLane] = {};
  load_row(b.of(q, d_len), d_len, q_row);
  load_row(b.of(dy, d_len), d_len, dy_row);
  const C row_lse = lse[at], row_delta = delta[at];
  for (long long j0 = 0; j0 <= b.last; j0 += kTileKeys) {
    __syncthreads();
    stage(k + b.base, j0, b.last, d_len, k_tile);
    stage(v + b.base, j0, b.last, d_len, v_tile);
    __syncthreads();
    for (int jj = 0; jj < kTileKeys && b.active && j0 + jj <= b.row; ++jj) {
      const C p = exp(scale * dot_tile(q_row, k_tile, jj, d_len) - row_lse);
      const C ds = scale * p * (dot_tile(dy_row, v_tile, jj, d_len) - row_delta);
      for (int e = 0; e < kPerLane; ++e) {
        const long long d = threadIdx.x % kWarp + kWarp * e;
        if (d < d_len) acc[e] += ds * k_tile[jj * d_len + d];
      }
    }
  }
  if (!b.active) return;
  store_row(dq + b.base + b.row * d_len, acc, d_len);
}

// dk[j] = sum over queries i >= j of ds_ij q_i and dv[j] = sum of p_ij dy_i: a warp per key row,
// the block's queries and their gradients staged in tiles.
template <class T, class C>
__global__ void attention_dkv(const T* dy, const T* q, const T* k, const T* v, const C* lse, const C* delta, T* dk, T* dv,
                              long long t_len, long long d_len, C scale) {
  extern __shared__ unsigned char shared[];
  const BlockRows<C> b(shared, t_len, d_len);  // its rows are keys
  C* q_tile = b.tile_a;
  C* dy_tile = b.tile_b;
  C k_row[kPerLane], v_row[kPerLane], dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  load_row(b.of(k, d_len), d_len, k_row);
  load_row(b.of(v, d_len), d_len, v_row);
  // Queries from the block's first key on see it; earlier tiles' rows are all before every key here.
  for (long long i0 = b.first; i0 < t_len; i0 += kTileKeys) {
    __syncthreads();
    stage(q + b.base, i0, t_len - 1, d_len, q_tile);
    stage(dy + b.base, i0, t_len - 1, d_len, dy_tile);
    __syncthreads();
    for (int ii = 0; ii < kTileKeys && b.active && i0 + ii < t_len; ++ii) {
      const long long i = i0 + ii;
      if (i < b.row) continue;
      const C p = exp(scale * dot_tile(k_row, q_tile, ii, d_len) - lse[b.head * t_len + i]);
      const C ds = scale * p * (dot_tile(v_row, dy_tile, ii, d_len) - delta[b.head * t_len + i]);
      for (int e = 0; e < kPerLane; ++e) {
        const long long d = threadIdx.x % kWarp + kWarp * e;
        if (d < d_len) {
          dv_acc[e] += p * dy_tile[ii * d_len + d];
          dk_acc[e] += ds * q_tile[ii * d_len + d];
        }
      }
    }
  }
  if (!b.active) return;
  store_row(dk + b.base + b.row * d_len, dk_acc, d_len);
  store_row(dv + b.base + b.row * d_len, dv_acc, d_len);
}

// The heads' shape [N, T, D], refusing what these kernels do not do.
void check_heads(const char* op, const Tensor& q, const Attrs& attrs, long long& heads, long long& t_len, long long& d_len) {
  TROUPE_CHECK(!attrs.has("dropout"), unsupported, op,
               ": dropout inside fused attention runs on the CPU only for now; run it without attention dropout on CUDA");
  heads = q.shape()[0];
  t_len = q.shape()[1];
  d_len = q.shape()[2];
  TROUPE_CHECK(d_len <= kMaxHeadDim, unsupported, op, " on CUDA takes heads of up to ", kMaxHeadDim, " values, got D = ",
               d_len);
}

// Lets `kernel` take `bytes` of dynamic shared memory (past the default 48 KiB: long heads in f64).
template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    cuda::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                     "cudaFuncSetAttribute");
}

dim3 grid_of(long long heads, long long t_len) {
  return dim3(static_cast<unsigned>((t_len + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(heads));
}

// in: q, k, v [N, T, D]; out: y [N, T, D], lse [N, T]; attr "scale".
template <class Host>
void attention_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  long long heads, t_len, d_len;
  check_heads("causal_attention", in[0], attrs, heads, t_len, d_len);
  if (heads * t_len * d_len == 0) return;
  const std::size_t shared = 2 * sizeof(C) * kTileKeys * static_cast<std::size_t>(d_len);
  allow_shared(attention_forward<T, C>, shared);
  attention_forward<T, C><<<grid_of(heads, t_len), kRowsPerBlock * kWarp, shared, cuda::launch_stream()>>>(
      static_cast<const T*>(in[0].raw_data()), static_cast<const T*>(in[1].raw_data()),
      static_cast<const T*>(in[2].raw_data()), static_cast<T*>(out[0].raw_data()), static_cast<C*>(out[1].raw_data()),
      t_len, d_len, static_cast<C>(attrs.get_double("scale")));
  cuda::finish_launch("causal_attention");
}

// in: dy, q, k, v, y [N, T, D], lse [N, T]; out: dq, dk, dv.
template <class Host>
void attention_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  using T = cuda::DeviceType<Host>;
  using C = cuda::ComputeOf<Host>;
  long long heads, t_len, d_len;
  check_heads("causal_attention_backward", in[1], attrs, heads, t_len, d_len);
  if (heads * t_len * d_len == 0) return;
  const auto* dy = static_cast<const T*>(in[0].raw_data());
  const auto* q = static_cast<const T*>(in[1].raw_data());
  const auto* k = static_cast<const T*>(in[2].raw_data());
  const auto* v = static_cast<const T*>(in[3].raw_data());
  const auto* lse = static_cast<const C*>(in[5].raw_data());
  const C scale = static_cast<C>(attrs.get_double("scale"));
  const cuda::Scratch delta(sizeof(C) * static_cast<std::size_t>(heads * t_len));
  const cudaStream_t stream = cuda::launch_stream();
  attention_delta<T, C><<<static_cast<unsigned>((heads * t_len + kRowsPerBlock - 1) / kRowsPerBlock),
                          kRowsPerBlock * kWarp, 0, stream>>>(dy, static_cast<const T*>(in[4].raw_data()),
                                                              delta.as<C>(), heads * t_len, d_len);
  const std::size_t shared = 2 * sizeof(C) * kTileKeys * static_cast<std::size_t>(d_len);
  allow_shared(attention_dq<T, C>, shared);
  allow_shared(attention_dkv<T, C>, shared);
  attention_dq<T, C><<<grid_of(heads, t_len), kRowsPerBlock * kWarp, shared, stream>>>(
      dy, q, k, v, lse, delta.as<C>(), static_cast<T*>(out[0].raw_data()), t_len, d_len, scale);
  attention_dkv<T, C><<<grid_of(heads, t_len), kRowsPerBlock * kWarp, shared, stream>>>(
      dy, q, k, v, lse, delta.as<C>(), static_cast<T*>(out[1].raw_data()), static_cast<T*>(out[2].raw_data()), t_len,
      d_len, scale);
  cuda::finish_launch("causal_attention_backward");
}

}  // namespace

TROUPE_REGISTER_CUDA_FLOAT_KERNELS("causal_attention", attention_kernel);
TROUPE_REGISTER_CUDA_FLOAT_KERNELS("causal_attention_backward", attention_backward_kernel);

}  // namespace troupe
