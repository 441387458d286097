#pragma once
// Symbolic shapes: a dimension is a known size or a product of named symbols times a constant
// (e.g. "batch", or "128*batch" after flattening), so one traced graph serves every batch size.
// Shape inference works on these; running a graph binds each symbol to a size.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/kernels/shape.hpp"

namespace troupe::graph {

/// Symbol name -> size, as bound when a traced graph is called.
using SymBindings = std::map<std::string, std::int64_t>;

/// One dimension: coefficient × product of symbols (no symbols = a fixed size).
class SymDim {
 public:
  /// A fixed dimension of `size` elements.
  SymDim(std::int64_t size = 1);  // NOLINT: implicit, so {2, 3} builds a shape
  /// A symbolic dimension called `name`.
  static SymDim symbol(const std::string& name);
  /// True when the size is fixed.
  bool is_static() const { return symbols_.empty(); }
  /// The fixed size (the coefficient when symbols remain).
  std::int64_t size() const { return coeff_; }
  /// The symbols of the product, sorted.
  const std::vector<std::string>& symbols() const { return symbols_; }
  /// Product of two dims ("batch" * 128 = "128*batch").
  SymDim operator*(const SymDim& o) const;
  /// this / o when it divides exactly (coefficient and symbols), else nullopt.
  std::optional<SymDim> divide(const SymDim& o) const;
  /// The size under `bindings`; throws naming the symbol if one is unbound.
  std::int64_t eval(const SymBindings& bindings) const;
  /// "8", "batch" or "128*batch".
  std::string str() const;
  bool operator==(const SymDim& o) const { return coeff_ == o.coeff_ && symbols_ == o.symbols_; }
  bool operator!=(const SymDim& o) const { return !(*this == o); }

 private:
  std::int64_t coeff_ = 1;
  std::vector<std::string> symbols_;
};

/// A shape whose dims may be symbolic.
using SymShape = std::vector<SymDim>;

/// "[batch, 128, 256]": how symbolic shapes appear in errors and dumps.
std::string sym_shape_str(const SymShape& s);
/// The symbolic form of a concrete shape.
SymShape to_sym(const Shape& s);
/// True when every dim is fixed.
bool is_static(const SymShape& s);
/// The concrete shape of a fully static SymShape; throws naming `what` if a symbol remains.
Shape to_static(const SymShape& s, const std::string& what);
/// The concrete shape of `s` under `bindings`.
Shape bind(const SymShape& s, const SymBindings& bindings);
/// Product of all dims (symbolic when any dim is).
SymDim numel(const SymShape& s);
/// NumPy broadcast of symbolic shapes: a fixed 1 yields to anything, equal dims stay; otherwise a
/// shape_mismatch Error naming `op` and both shapes.
SymShape broadcast(const SymShape& a, const SymShape& b, const std::string& op);

}  // namespace troupe::graph
