#include "shard_rules.hpp"

namespace troupe::graph::detail {

namespace {

bool is_one(const SymDim& d) { return d.is_static() && d.size() == 1; }

// The partial-sum signature with the inputs flagged in `partial` partial and the others broadcast.
ShardSignature partial_through(std::size_t inputs, std::size_t outputs, const std::vector<bool>& partial) {
  ShardSignature s{std::vector<Placement>(inputs), std::vector<Placement>(outputs, Placement::partial_sum())};
  for (std::size_t i = 0; i < inputs; ++i)
    if (partial[i]) s.inputs[i] = Placement::partial_sum();
  return s;
}

}  // namespace

std::vector<ShardSignature> shard_pointwise(const ShardContext& c) {
  std::vector<ShardSignature> out;
  if (c.outputs.empty()) return out;
  const std::size_t rank = c.outputs[0].shape.size();
  for (const ValueInfo& o : c.outputs)
    if (o.shape.size() != rank) return out;
  for (std::size_t d = 0; d < rank; ++d) {
    ShardSignature s{{}, std::vector<Placement>(c.outputs.size(), Placement::split(static_cast<int>(d)))};
    for (const ValueInfo& in : c.inputs) {
      const std::size_t r = in.shape.size();
      // Broadcasting aligns the trailing dims: output dim d is this input's dim d - (rank - r).
      if (d + r < rank || is_one(in.shape[d + r - rank])) s.inputs.push_back(Placement::broadcast());
      else s.inputs.push_back(Placement::split(static_cast<int>(d + r - rank)));
    }
    out.push_back(s);
    // A blocked split of an input (Placement::blocks) passes through when every input that has the
    // dim is split alike.
    for (std::size_t i = 0; i < c.inputs.size() && i < c.current.size(); ++i) {
      const Placement& now = c.current[i];
      if (now.kind != Placement::Kind::split || now.blocks == 1 || s.inputs[i].kind != Placement::Kind::split ||
          s.inputs[i].dim != now.dim)
        continue;
      ShardSignature blocked = s;
      for (Placement& p : blocked.inputs)
        if (p.kind == Placement::Kind::split) p.blocks = now.blocks;
      for (Placement& p : blocked.outputs) p.blocks = now.blocks;
      out.push_back(blocked);
      break;
    }
  }
  return out;
}

std::vector<ShardSignature> shard_additive(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_pointwise(c);
  out.push_back(partial_through(c.inputs.size(), c.outputs.size(), std::vector<bool>(c.inputs.size(), true)));
  return out;
}

std::vector<ShardSignature> shard_linear_in_first(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_pointwise(c);
  std::vector<bool> first(c.inputs.size(), false);
  if (!first.empty()) first[0] = true;
  out.push_back(partial_through(c.inputs.size(), c.outputs.size(), first));
  return out;
}

std::vector<ShardSignature> shard_product(const ShardContext& c) {
  std::vector<ShardSignature> out = shard_pointwise(c);
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    std::vector<bool> one(c.inputs.size(), false);
    one[i] = true;
    out.push_back(partial_through(c.inputs.size(), c.outputs.size(), one));
  }
  return out;
}

std::vector<ShardSignature> shard_all_but_axis(const ShardContext& c) {
  const auto rank = static_cast<std::int64_t>(c.inputs[0].shape.size());
  std::int64_t axis = c.attrs.get_int("axis");
  if (axis < 0) axis += rank;
  std::vector<ShardSignature> out;
  for (int d = 0; d < rank; ++d)
    if (d != axis)
      out.push_back({std::vector<Placement>(c.inputs.size(), Placement::split(d)),
                     std::vector<Placement>(c.outputs.size(), Placement::split(d))});
  return out;
}

std::vector<ShardSignature> shard_rows(const ShardContext& c, int row_dims, int row_inputs) {
  std::vector<ShardSignature> out;
  if (c.inputs.empty()) return out;
  const SymShape& x = c.inputs[0].shape;
  const std::size_t rank = x.size();
  if (row_dims < 0 || static_cast<std::size_t>(row_dims) > rank) return out;
  const std::size_t leading = rank - static_cast<std::size_t>(row_dims);
  for (std::size_t i = 0; i < static_cast<std::size_t>(row_inputs) && i < c.inputs.size(); ++i)
    if (c.inputs[i].shape.size() != rank) return out;
  for (const ValueInfo& o : c.outputs)
    if (o.shape.size() != rank && !(o.shape.size() == leading && SymShape(x.begin(), x.begin() + leading) == o.shape)) return out;
  for (std::size_t d = 0; d < leading; ++d) {
    const Placement split = Placement::split(static_cast<int>(d));
    ShardSignature s{std::vector<Placement>(c.inputs.size()), std::vector<Placement>(c.outputs.size(), split)};
    for (std::size_t i = 0; i < static_cast<std::size_t>(row_inputs) && i < c.inputs.size(); ++i) s.inputs[i] = split;
    out.push_back(s);
  }
  return out;
}

}  // namespace troupe::graph::detail
