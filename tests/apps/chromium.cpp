#include "apps/chromium.hpp"

#include <unistd.h>

namespace troupe::test {

std::string headless_chromium() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (access(candidate, X_OK) == 0)
      return std::string(candidate) + " --headless=new --no-sandbox --disable-gpu --virtual-time-budget=30000 ";
  return "";
}

}  // namespace troupe::test
