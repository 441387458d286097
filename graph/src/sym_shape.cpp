#include "troupe/graph/sym_shape.hpp"

#include <sstream>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

SymDim::SymDim(std::int64_t size) : size_(size) {}

SymDim SymDim::symbol(std::string symbol) {
  TROUPE_CHECK(!symbol.empty(), invalid_argument, "a symbolic dimension needs a non-empty name");
  SymDim d(-1);
  d.symbol_ = std::move(symbol);
  return d;
}

std::string SymDim::str() const { return is_static() ? std::to_string(size_) : symbol_; }

std::string sym_shape_str(const SymShape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i].str();
  os << ']';
  return os.str();
}

SymShape to_sym(const Shape& s) { return SymShape(s.begin(), s.end()); }

bool is_static(const SymShape& s) {
  for (const auto& d : s)
    if (!d.is_static()) return false;
  return true;
}

Shape to_static(const SymShape& s, const char* what) {
  Shape out;
  for (const auto& d : s) {
    TROUPE_CHECK(d.is_static(), shape_mismatch, what, ": needs a fixed shape but got ", sym_shape_str(s),
                 "; give the dimension '", d.name(), "' a fixed size in the input signature");
    out.push_back(d.size());
  }
  return out;
}

Shape bind(const SymShape& s, const SymBindings& bindings) {
  Shape out;
  for (const auto& d : s) {
    if (d.is_static()) {
      out.push_back(d.size());
      continue;
    }
    auto it = bindings.find(d.name());
    TROUPE_CHECK(it != bindings.end(), invalid_argument, "symbolic dimension '", d.name(),
                 "' of shape ", sym_shape_str(s), " has no size bound");
    out.push_back(it->second);
  }
  return out;
}

std::int64_t static_numel(const SymShape& s) {
  std::int64_t n = 1;
  for (const auto& d : s) {
    if (!d.is_static()) return -1;
    n *= d.size();
  }
  return n;
}

SymShape broadcast(const SymShape& a, const SymShape& b, const char* op) {
  const std::size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const bool has_a = i < a.size(), has_b = i < b.size();
    const SymDim da = has_a ? a[a.size() - 1 - i] : SymDim(1);
    const SymDim db = has_b ? b[b.size() - 1 - i] : SymDim(1);
    SymDim r;
    if (da == db) r = da;
    else if (da.is_static() && da.size() == 1) r = db;
    else if (db.is_static() && db.size() == 1) r = da;
    else
      fail(ErrorKind::shape_mismatch, op, ": cannot broadcast shapes ", sym_shape_str(a), " and ", sym_shape_str(b),
           " (dimension ", da.str(), " vs ", db.str(), ")");
    out[rank - 1 - i] = r;
  }
  return out;
}

}  // namespace troupe::graph
