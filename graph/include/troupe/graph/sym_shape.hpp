#pragma once
// Symbolic shapes: a dimension is either a known size or a named symbol (e.g. "batch"), so one
// traced graph serves every batch size. Shape inference works on these; execution binds symbols.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/kernels/shape.hpp"

namespace troupe::graph {

/// One dimension: a fixed size, or a symbol whose size is known only when the graph runs.
class SymDim {
 public:
  /// A fixed dimension of `size` elements.
  SymDim(std::int64_t size = 1);  // NOLINT: implicit, so {2, 3} builds a shape
  /// A symbolic dimension called `symbol`.
  static SymDim symbol(std::string symbol);
  /// True when the size is fixed.
  bool is_static() const { return symbol_.empty(); }
  /// The fixed size; only meaningful when is_static().
  std::int64_t size() const { return size_; }
  /// The symbol's name; empty for fixed dims.
  const std::string& name() const { return symbol_; }
  /// "8" or "batch".
  std::string str() const;
  bool operator==(const SymDim& o) const { return size_ == o.size_ && symbol_ == o.symbol_; }
  bool operator!=(const SymDim& o) const { return !(*this == o); }

 private:
  std::int64_t size_ = 1;
  std::string symbol_;
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
Shape to_static(const SymShape& s, const char* what);
/// Symbol name -> size, as bound when a traced graph is called.
using SymBindings = std::map<std::string, std::int64_t>;
/// The concrete shape of `s` under `bindings`; throws if a symbol is unbound.
Shape bind(const SymShape& s, const SymBindings& bindings);
/// Product of the dims if all are static, else -1.
std::int64_t static_numel(const SymShape& s);
/// NumPy broadcast of symbolic shapes: a fixed 1 yields to anything, equal dims (fixed or same
/// symbol) stay; otherwise a shape_mismatch Error naming `op` and both shapes.
SymShape broadcast(const SymShape& a, const SymShape& b, const char* op);

}  // namespace troupe::graph
