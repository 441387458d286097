#pragma once
// Headless Chromium for the browser tests (troupe-serve's page, troupe-report's): where it is, and
// the command line they share. They skip when it is missing; scripts/setup.sh --browser (which
// scripts/test.sh runs) installs it.

#include <string>

namespace troupe::test {

/// Why a browser test skips.
inline constexpr const char* kNoChromium = "chromium is not installed; scripts/setup.sh --browser installs it";

/// The command that runs Chromium headless (no sandbox, no GPU, 30 s of virtual time for the page's
/// scripts), ending in a space for the flags that follow (--dump-dom URL, --screenshot=FILE URL);
/// "" when Chromium is not installed.
std::string headless_chromium();

}  // namespace troupe::test
