#pragma once
// Helpers of the graph pass suites: counting ops, and running a graph before and after passes to
// check the results are the same bits.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "troupe/graph/executor.hpp"
#include "troupe/graph/graph.hpp"
#include "troupe/graph/trace.hpp"

namespace troupe::test {

/// The tensors of fn's parameters, in the order of its graph's parameters.
inline std::vector<Tensor> parameter_tensors(const graph::TracedFunction& fn) {
  std::vector<Tensor> out;
  for (const graph::Var& p : fn.parameters()) out.push_back(p.tensor());
  return out;
}

/// How many nodes of `g` run `op`.
inline int count_ops(const graph::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

/// True when the two tensors have the same dtype, shape, strides and element bits (NaN payloads
/// included): passes promise consumers the very tensor they read before, layout included.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.strides() != b.strides()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

/// Runs both graphs on the same inputs and parameters and expects every output bit-identical.
inline void expect_same_results(const graph::Graph& original, const graph::Graph& optimized,
                                const std::vector<Tensor>& inputs, const std::vector<Tensor>& parameters = {}) {
  const std::vector<Tensor> a = graph::execute(original, inputs, parameters);
  const std::vector<Tensor> b = graph::execute(optimized, inputs, parameters);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(same_bits(a[k], b[k])) << "output " << k << " differs: " << a[k].str() << " vs " << b[k].str()
                                       << "\nbefore:\n" << original.dump() << "after:\n" << optimized.dump();
}

}  // namespace troupe::test
