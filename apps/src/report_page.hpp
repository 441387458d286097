#pragma once
// The HTML of a troupe-report page: styles, Chart.js and the script that draws the charts from the
// run's data (report.cpp gathers it).

#include <string>

namespace troupe::apps {

/// The whole page: `title` (plain text, escaped here) as its title, `data` (JSON) as the data its
/// script charts, Chart.js embedded.
std::string report_html(const std::string& title, const std::string& data);

}  // namespace troupe::apps
