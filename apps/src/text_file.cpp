#include "troupe/apps/text_file.hpp"

#include <fstream>
#include <sstream>

#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::apps {

std::string read_text_file(const std::string& path, const std::string& expected) {
  models::require_file(path, expected);
  std::ifstream in(path, std::ios::binary);
  TROUPE_CHECK(in.good(), io, "cannot open '", path, "'; check its permissions (", expected, ")");
  std::ostringstream s;
  s << in.rdbuf();
  TROUPE_CHECK(!in.bad(), io, "cannot read '", path, "'");
  return s.str();
}

}  // namespace troupe::apps
