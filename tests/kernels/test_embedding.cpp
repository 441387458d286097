// embedding lookup / backward against a naive reference.
#include <gtest/gtest.h>

#include "kernels/reference.hpp"
#include "troupe/kernels/embedding.hpp"

using namespace troupe;

TEST(Embedding, ForwardBackward) {
  Tensor w = test::random_tensor({3, 5}, 1).transpose(0, 1);  // [5, 3] non-contiguous
  Tensor ids = Tensor::from_vector<std::int32_t>({4, 0, 4, 2, 1, 4}, {2, 3});
  auto wv = test::values(w);
  std::vector<int> idv{4, 0, 4, 2, 1, 4};
  std::vector<double> ref;
  for (int i : idv)
    for (int j = 0; j < 3; ++j) ref.push_back(wv[i * 3 + j]);
  test::expect_close(kernels::embedding(w, ids), ref, {2, 3, 3});
  Tensor g = test::random_tensor({2, 3, 3}, 2);
  auto gv = test::values(g);
  std::vector<double> dw(15, 0.0);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j) dw[idv[i] * 3 + j] += gv[i * 3 + j];
  test::expect_close(kernels::embedding_backward(g, ids.to(DType::i64), 5), dw, {5, 3});
}

TEST(Embedding, BadInput) {
  Tensor w = test::random_tensor({4, 2}, 1);
  try {
    kernels::embedding(w, Tensor::from_vector<std::int64_t>({1, 7}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
    EXPECT_NE(std::string(e.what()).find("embedding"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("7"), std::string::npos);
  }
  EXPECT_THROW(kernels::embedding(w, test::random_tensor({2}, 3)), Error);
  EXPECT_THROW(kernels::embedding_backward(test::random_tensor({3, 2}, 3), Tensor::zeros({2}, DType::i64), 4), Error);
}

// Megatron's vocab-parallel lookup: devices holding rows [0, 2), [2, 4) and [4, 6) of a table look
// up only their ids (zero rows elsewhere), so their results add up to the whole lookup; likewise
// their slices of the table's gradient join into the whole gradient.
TEST(Embedding, SlicesOfTheTableAddUpToTheWholeLookup) {
  const Tensor w = test::random_tensor({6, 3}, 4), g = test::random_tensor({2, 3, 3}, 5);
  const Tensor ids = Tensor::from_vector<std::int64_t>({5, 0, 2, 2, 1, 4}, {2, 3});
  std::vector<double> sum(18, 0.0), dw;
  for (std::int64_t first = 0; first < 6; first += 2) {
    const kernels::TableSlice slice{first, 6};
    const std::vector<double> part = test::values(kernels::embedding(w.slice(0, first, first + 2), ids, slice));
    for (std::size_t i = 0; i < part.size(); ++i) sum[i] += part[i];
    const std::vector<double> rows = test::values(kernels::embedding_backward(g, ids, 2, slice));
    dw.insert(dw.end(), rows.begin(), rows.end());
  }
  test::expect_close(kernels::embedding(w, ids), sum, {2, 3, 3});
  test::expect_close(kernels::embedding_backward(g, ids, 6), dw, {6, 3});
}

// A slice still checks every id against the whole table, and must lie within it.
TEST(Embedding, ASliceRefusesIdsOutsideTheWholeTable) {
  const Tensor w = test::random_tensor({2, 3}, 6);
  try {
    kernels::embedding(w, Tensor::from_vector<std::int64_t>({1, 6}, {2}), {2, 6});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_range);
    EXPECT_NE(std::string(e.what()).find("id 6 at position [1] is outside [0, 6)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::embedding(w, Tensor::from_vector<std::int64_t>({1}, {1}), {5, 6}), Error);
  EXPECT_THROW(kernels::embedding_backward(test::random_tensor({1, 3}, 7), Tensor::from_vector<std::int64_t>({1}, {1}), 2, {-1, 6}),
               Error);
}
