#include "troupe/graph/sym_shape.hpp"

#include <algorithm>
#include <sstream>

#include "troupe/kernels/error.hpp"

namespace troupe::graph {

SymDim::SymDim(std::int64_t size) : coeff_(size) {}

SymDim SymDim::symbol(const std::string& name) {
  TROUPE_CHECK(!name.empty(), invalid_argument, "a symbolic dimension needs a non-empty name");
  SymDim d(1);
  d.symbols_.push_back(name);
  return d;
}

SymDim SymDim::operator*(const SymDim& o) const {
  SymDim r(coeff_ * o.coeff_);
  r.symbols_ = symbols_;
  r.symbols_.insert(r.symbols_.end(), o.symbols_.begin(), o.symbols_.end());
  std::sort(r.symbols_.begin(), r.symbols_.end());
  return r;
}

std::optional<SymDim> SymDim::divide(const SymDim& o) const {
  if (o.coeff_ == 0 || coeff_ % o.coeff_ != 0) return std::nullopt;
  SymDim r(coeff_ / o.coeff_);
  std::vector<std::string> rest = symbols_;
  for (const auto& s : o.symbols_) {
    auto it = std::find(rest.begin(), rest.end(), s);
    if (it == rest.end()) return std::nullopt;
    rest.erase(it);
  }
  r.symbols_ = std::move(rest);
  return r;
}

std::int64_t SymDim::eval(const SymBindings& bindings) const {
  std::int64_t v = coeff_;
  for (const auto& s : symbols_) {
    auto it = bindings.find(s);
    TROUPE_CHECK(it != bindings.end(), invalid_argument, "symbolic dimension '", s, "' has no size bound");
    v *= it->second;
  }
  return v;
}

std::string SymDim::str() const {
  if (symbols_.empty()) return std::to_string(coeff_);
  std::string out = coeff_ == 1 ? "" : std::to_string(coeff_) + "*";
  for (std::size_t i = 0; i < symbols_.size(); ++i) out += (i ? "*" : "") + symbols_[i];
  return out;
}

std::string sym_shape_str(const SymShape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i].str();
  os << ']';
  return os.str();
}

SymShape to_sym(const Shape& s) { return SymShape(s.begin(), s.end()); }

bool is_static(const SymShape& s) {
  return std::all_of(s.begin(), s.end(), [](const SymDim& d) { return d.is_static(); });
}

Shape to_static(const SymShape& s, const std::string& what) {
  Shape out;
  for (const auto& d : s) {
    TROUPE_CHECK(d.is_static(), shape_mismatch, what, ": needs a fixed shape but got ", sym_shape_str(s),
                 "; give the dimension '", d.str(), "' a fixed size in the input signature");
    out.push_back(d.size());
  }
  return out;
}

Shape bind(const SymShape& s, const SymBindings& bindings) {
  Shape out;
  for (const auto& d : s) out.push_back(d.eval(bindings));
  return out;
}

SymDim numel(const SymShape& s) {
  SymDim n(1);
  for (const auto& d : s) n = n * d;
  return n;
}

SymShape broadcast(const SymShape& a, const SymShape& b, const std::string& op) {
  const std::size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const SymDim da = i < a.size() ? a[a.size() - 1 - i] : SymDim(1);
    const SymDim db = i < b.size() ? b[b.size() - 1 - i] : SymDim(1);
    SymDim r;
    if (da == db) r = da;
    else if (da == SymDim(1)) r = db;
    else if (db == SymDim(1)) r = da;
    else
      fail(ErrorKind::shape_mismatch, op, ": cannot broadcast shapes ", sym_shape_str(a), " and ", sym_shape_str(b),
           " (dimension ", da.str(), " vs ", db.str(), ")");
    out[rank - 1 - i] = r;
  }
  return out;
}

}  // namespace troupe::graph
