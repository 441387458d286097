// Dropout's counter-based decisions (troupe/kernels/dropout.hpp): the drop rate and the kept
// elements' scale, the same decisions for a tensor whole and in shards or row ranges, other
// decisions at another step, site or seed, and bad probabilities refused.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.hpp"
#include "troupe/kernels/dropout.hpp"

using namespace troupe;
using kernels::RandomPosition;

namespace {

std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

}  // namespace

TEST(Dropout, DropsAboutPAndScalesTheRestByItsInverse) {
  const Tensor mask = kernels::dropout_mask({64, 32, 48}, DType::f32, 0.25, 7, RandomPosition{1, 1, 0});
  std::int64_t dropped = 0;
  for (float f : values(mask)) {
    EXPECT_TRUE(f == 0.0f || f == static_cast<float>(1 / 0.75)) << f;
    dropped += f == 0.0f;
  }
  const double rate = static_cast<double>(dropped) / static_cast<double>(mask.numel());
  EXPECT_NEAR(rate, 0.25, 0.01);  // 98304 draws: the standard error is 0.0014
  for (float f : values(kernels::dropout_mask({8, 9}, DType::f32, 0.0, 7, RandomPosition{1, 1, 0}))) EXPECT_EQ(f, 1.0f);
}

// A shard (rows and dim-1 offsets) or a later row range draws what the whole tensor holds there.
TEST(Dropout, ShardsAndRowRangesDrawWhatTheWholeTensorHolds) {
  const RandomPosition at{3, 5, 100};
  const Tensor whole = kernels::dropout_mask({6, 4, 7}, DType::f32, 0.5, 11, at);
  const Tensor shard = kernels::dropout_mask({3, 2, 7}, DType::f32, 0.5, 11, at, 3, 2);
  EXPECT_EQ(values(shard), values(whole.slice(0, 3, 6).slice(1, 2, 4)));
  const Tensor rows = kernels::dropout_mask({2, 4, 7}, DType::f32, 0.5, 11, RandomPosition{3, 5, 104});
  EXPECT_EQ(values(rows), values(whole.slice(0, 4, 6)));
  // Each draw is its own: another step, site or seed decides otherwise.
  for (const auto& [step, site, seed] : {std::tuple{6, 11, 3}, std::tuple{5, 12, 3}, std::tuple{5, 11, 4}})
    EXPECT_NE(values(kernels::dropout_mask({6, 4, 7}, DType::f32, 0.5, site, RandomPosition{static_cast<std::uint64_t>(seed),
                                                                                              static_cast<std::uint64_t>(step), 100})),
              values(whole));
  // The stream's own factors, four at a time, are what the mask holds.
  const kernels::DropoutStream stream(at, 11, 0.5);
  const auto four = stream.factors(100 + 1, 2, 4);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(four[static_cast<std::size_t>(j)], values(whole)[(1 * 4 + 2) * 7 + 4 + j]);
}

TEST(Dropout, ProbabilitiesOutsideZeroToOneAreRefused) {
  for (double p : {-0.1, 1.0, std::nan("")})
    test::expect_error_mentions([&] { kernels::dropout_mask({2, 2}, DType::f32, p, 1, {}); }, {"dropout probability", "--dropout"});
  test::expect_error_mentions([] { kernels::dropout_mask({}, DType::f32, 0.1, 1, {}); }, {"scalar", "rank 1"});
}
