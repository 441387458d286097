// f16/bf16 conversions: round to nearest even, subnormals, overflow, NaN and Inf; the vectorised
// dense conversions of Tensor::to agree with the scalar ones bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "troupe/kernels/dtype.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/tensor.hpp"

using namespace troupe;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST(Half, ExactValuesRoundTrip) {
  for (float v : {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333251953125f}) {
    EXPECT_EQ(half_to_float(float_to_half(v)), v) << v;
  }
  EXPECT_EQ(float_to_half(1.f).bits, 0x3c00);
  EXPECT_EQ(float_to_half(-2.f).bits, 0xc000);
  EXPECT_EQ(float_to_half(65504.f).bits, 0x7bff);
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(float_to_half(1.f + std::ldexp(1.f, -11)).bits, 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(float_to_half(1.f + 3 * std::ldexp(1.f, -11)).bits, 0x3c02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(float_to_half(std::nextafter(1.f + std::ldexp(1.f, -11), 2.f)).bits, 0x3c01);
  // Subnormal ties: 2^-25 (half of the smallest subnormal) rounds to 0, 3*2^-25 to 2*2^-24.
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -25)).bits, 0x0000);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.f, -25)).bits, 0x0002);
}

TEST(Half, OverflowInfAndNaN) {
  EXPECT_EQ(float_to_half(65519.f).bits, 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(float_to_half(65520.f).bits, 0x7c00);  // the tie rounds to even: Inf
  EXPECT_EQ(float_to_half(1e10f).bits, 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_TRUE(std::isinf(half_to_float(Half{0x7c00})));
  const Half nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan.bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan.bits & 0x03ff, 0);
  // A signalling NaN whose payload lives only in low bits must not become Inf.
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(half_to_float(Half{0x7e00})));
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const Half h{static_cast<std::uint16_t>(b)};
    const float f = half_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f).bits, h.bits) << std::hex << b;
  }
}

TEST(BFloat16, RoundingNaNInf) {
  EXPECT_EQ(float_to_bf16(1.f).bits, 0x3f80);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8)).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(1.f + 3 * std::ldexp(1.f, -8)).bits, 0x3f82);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));
  // The largest finite float rounds up to Inf, as IEEE rounding requires.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80);
}

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  try {
    parse_dtype("f128");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f128"), std::string::npos);
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  }
}

// Tensor::to converts dense runs with vectorised loops; every f32 bit pattern class (normal,
// subnormal, halfway cases, overflow, Inf, NaN with payloads) must give the scalar function's bits.
TEST(DType, DenseConversionsMatchTheScalarOnesBitForBit) {
  std::vector<float> v;
  for (std::uint32_t u = 0; u < 0xffffffffu - 0x10000u; u += 0x10001u) v.push_back(from_bits(u));  // ~65k patterns
  for (std::uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x477ff000u, 0x477fefffu, 0x7f800001u, 0xff800000u,
                          0x33000000u, 0x33000001u, 0x00000001u})
    v.push_back(from_bits(u));
  const Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
  const Tensor b = t.to(DType::bf16), h = t.to(DType::f16);
  const BFloat16* bp = b.data<BFloat16>();
  const Half* hp = h.data<Half>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bp[i].bits, float_to_bf16(v[i]).bits) << std::hex << i;
    ASSERT_EQ(hp[i].bits, float_to_half(v[i]).bits) << std::hex << i;
  }
  const Tensor back_b = b.to(DType::f32), back_h = h.to(DType::f32);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float eb = bf16_to_float(bp[i]), eh = half_to_float(hp[i]);
    const float gb = back_b.data<float>()[i], gh = back_h.data<float>()[i];
    ASSERT_EQ(std::memcmp(&eb, &gb, 4), 0) << i;
    ASSERT_EQ(std::memcmp(&eh, &gh, 4), 0) << i;
  }
}
