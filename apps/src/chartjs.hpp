#pragma once
// Chart.js (its minified UMD build, MIT licence), embedded at build time from the file the CMake
// cache variable TROUPE_CHARTJS names (Debian's libjs-chart.js by default; apps/CMakeLists.txt):
// an installed troupe-report then needs nothing at run time, and its pages fetch nothing.

#include <string_view>

namespace troupe::apps {

/// The library's source, which a report page runs as its first script.
std::string_view chartjs_source();

}  // namespace troupe::apps
