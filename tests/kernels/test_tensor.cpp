// Tensors: creation, views without copies, contiguous(), copy/cast between dtypes, devices.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/tensor.hpp"

using namespace troupe;
using troupe::test::values;

namespace {
Tensor iota(const Shape& s) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, s);
}
}  // namespace

TEST(Tensor, CreateAndDescribe) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Strides{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.str(), "Tensor(f32, [2, 3], cpu)");
  EXPECT_EQ(values(t), std::vector<double>(6, 1.5));
  EXPECT_EQ(Tensor::scalar(4.0).item(), 4.0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_THROW(Tensor::empty({2, -1}), Error);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(t.data<std::int32_t>(), Error);
}

TEST(Tensor, TransposeIsAViewAndContiguousCopies) {
  Tensor t = iota({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(values(tt), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor c = tt.contiguous();
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(values(c), values(tt));
  EXPECT_EQ(t.contiguous().storage(), t.storage());
}

// A permuted view of any dtype copies its dense runs whole (the heads of attention, [B, H, T, D] to
// [B, T, H, D]): every element lands where its indices say, bf16 and f64 alike.
TEST(Tensor, PermutedViewsCopyRunByRunInEveryDtype) {
  for (DType dt : {DType::bf16, DType::f32, DType::f64, DType::i64}) {
    const Tensor t = iota({2, 3, 5, 4}).to(dt);
    const Tensor c = t.permute({0, 2, 1, 3}).contiguous();
    ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 4}));
    const std::vector<double> v = values(c);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t d = 0; d < 4; ++d)
            EXPECT_EQ(v[static_cast<std::size_t>(((b * 5 + i) * 3 + h) * 4 + d)], static_cast<double>(((b * 3 + h) * 5 + i) * 4 + d))
                << dtype_name(dt);
  }
}

TEST(Tensor, ReshapeViewsWhenPossible) {
  Tensor t = iota({2, 3, 4});
  Tensor r = t.reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.storage(), t.storage());
  // A permuted tensor whose merged dims stay contiguous can still be viewed.
  Tensor p = t.permute({1, 0, 2});  // [3, 2, 4]
  Tensor v = p.reshape({3, 8});     // dims 1,2 of p are not contiguous together -> copy
  EXPECT_EQ(values(v), values(p));
  Tensor q = t.transpose(1, 2);  // [2, 4, 3]
  Tensor qv = q.view({2, 4, 3, 1});
  EXPECT_EQ(qv.storage(), t.storage());
  EXPECT_THROW(q.view({8, 3}), Error);
  EXPECT_EQ(values(q.reshape({8, 3})), values(q));
  EXPECT_THROW(t.reshape({5, -1}), Error);
  EXPECT_THROW(t.reshape({-1, -1}), Error);
}

TEST(Tensor, SliceExpandSqueeze) {
  Tensor t = iota({4, 5});
  Tensor s = t.slice(1, 1, -1, 2);  // columns 1, 3
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(values(s), (std::vector<double>{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(s.storage(), t.storage());
  Tensor rows = t.slice(0, 2, 10);
  EXPECT_EQ(rows.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(rows)[0], 10);
  Tensor col = iota({3, 1});
  Tensor e = col.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_EQ(values(e)[4], 1);
  EXPECT_THROW(t.expand({4, 6}), Error);
  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{4, 1, 5}));
  EXPECT_EQ(u.squeeze(1).shape(), (Shape{4, 5}));
  EXPECT_THROW(t.squeeze(0), Error);
  EXPECT_THROW(t.slice(2, 0, 1), Error);
  EXPECT_THROW(t.permute({0, 0}), Error);
}

TEST(Tensor, CopyAndCastBetweenDtypes) {
  Tensor f = Tensor::from_vector(std::vector<float>{-1.5f, 0.f, 2.25f, 1000.f}, {2, 2});
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    Tensor c = f.to(t);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_EQ(values(c), (std::vector<double>{-1.5, 0, 2.25, 1000})) << dtype_name(t);
  }
  Tensor i = f.to(DType::i32);
  EXPECT_EQ(values(i), (std::vector<double>{-1, 0, 2, 1000}));
  EXPECT_EQ(values(i.to(DType::i64).to(DType::f32)), values(i));
  EXPECT_EQ(values(Tensor::from_vector(std::vector<float>{3.f, 250.f}, {2}).to(DType::u8)),
            (std::vector<double>{3, 250}));
  // Strided source, broadcast source.
  Tensor dst = Tensor::zeros({2, 2}, DType::bf16);
  dst.copy_from(f.transpose(0, 1));
  EXPECT_EQ(values(dst), (std::vector<double>{-1.5, 2.25, 0, 1000}));
  dst.copy_from(Tensor::from_vector(std::vector<float>{7.f, 8.f}, {2}));
  EXPECT_EQ(values(dst), (std::vector<double>{7, 8, 7, 8}));
  EXPECT_THROW(dst.copy_from(Tensor::zeros({3})), Error);
}

TEST(Tensor, EmptyTensors) {
  Tensor z = Tensor::empty({0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.reshape({3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(z.clone().numel(), 0);
}

TEST(Tensor, SizesThatOverflowSixtyFourBitsAreRefused) {
  EXPECT_EQ(shape_numel({0, std::int64_t(1) << 62, 8}), 0);
  EXPECT_EQ(shape_nbytes({3, 5}, 8), 120u);
  EXPECT_THROW(shape_numel({std::int64_t(1) << 32, std::int64_t(1) << 32}), Error);
  EXPECT_THROW(shape_numel({2, -3}), Error);
  EXPECT_THROW(shape_nbytes({std::int64_t(1) << 62}, 4), Error);
  // Before any allocation, so a huge request is an error rather than a tensor on a small buffer.
  EXPECT_THROW(Tensor::empty({std::int64_t(1) << 40, std::int64_t(1) << 30}), Error);
}

TEST(Device, ParseAndName) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda").str(), "cuda:0");
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}
