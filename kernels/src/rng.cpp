#include "troupe/kernels/rng.hpp"

#include <cmath>

namespace troupe {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c, std::uint64_t key) {
  // Constants of Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(m0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(m1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
    k0 += w0;
    k1 += w1;
  }
  return c;
}

namespace {

// Uniform in [0, 1) from the top 24 bits: every value is exactly representable in f32.
inline double unit(std::uint32_t x) { return static_cast<double>(x >> 8) * (1.0 / 16777216.0); }

// Calls put(i, value) for i in [0, n); value i comes from counter block offset + i / 4, word i % 4.
// `transform` turns the four words of one block into four values.
template <class Transform, class Put>
void fill_blocks(std::uint64_t seed, std::uint64_t offset, std::int64_t n, Transform transform, Put put) {
  for (std::int64_t b = 0; b * 4 < n; ++b) {
    const std::uint64_t ctr = offset + static_cast<std::uint64_t>(b);
    const auto words = philox4x32({static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0, 0}, seed);
    const auto values = transform(words);
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) put(b * 4 + j, values[j]);
  }
}

// Writes values into the (possibly strided) floating tensor `t` in row-major element order.
template <class Transform>
void fill_tensor(Tensor& t, std::uint64_t seed, std::uint64_t offset, const char* op, Transform transform) {
  TROUPE_CHECK(t.defined() && is_floating(t.dtype()), dtype_mismatch, op, ": needs a floating tensor, got ", t.str());
  TROUPE_CHECK(t.device().is_cpu(), device_mismatch, op, ": fills host tensors; got ", t.str(),
               " (fill on the host, then copy with .to(device))");
  Tensor dense = t.is_contiguous() ? t : Tensor::empty(t.shape(), t.dtype());
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* p = static_cast<T*>(dense.raw_data());
      fill_blocks(seed, offset, dense.numel(), transform, [&](std::int64_t i, double v) { p[i] = from_double<T>(v); });
    }
  });
  if (!t.is_contiguous()) t.copy_from(dense);
}

std::uint64_t blocks_for(std::int64_t n) { return static_cast<std::uint64_t>((n + 3) / 4); }

}  // namespace

void Generator::uniform_(Tensor& t, double low, double high) {
  TROUPE_CHECK(low <= high, invalid_argument, "uniform_: low ", low, " > high ", high);
  fill_tensor(t, seed_, offset_, "uniform_", [&](const std::array<std::uint32_t, 4>& w) {
    std::array<double, 4> v;
    for (int j = 0; j < 4; ++j) v[j] = low + (high - low) * unit(w[j]);
    return v;
  });
  offset_ += blocks_for(t.numel());
}

void Generator::normal_(Tensor& t, double mean, double std) {
  TROUPE_CHECK(std >= 0, invalid_argument, "normal_: std must be >= 0, got ", std);
  fill_tensor(t, seed_, offset_, "normal_", [&](const std::array<std::uint32_t, 4>& w) {
    std::array<double, 4> v;
    for (int j = 0; j < 4; j += 2) {
      const double u1 = 1.0 - unit(w[j]);  // (0, 1]: log is finite
      const double u2 = unit(w[j + 1]);
      const double r = std::sqrt(-2.0 * std::log(u1));
      v[j] = mean + std * r * std::cos(2.0 * M_PI * u2);
      v[j + 1] = mean + std * r * std::sin(2.0 * M_PI * u2);
    }
    return v;
  });
  offset_ += blocks_for(t.numel());
}

}  // namespace troupe
