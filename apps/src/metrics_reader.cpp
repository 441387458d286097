#include "troupe/apps/metrics_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "troupe/models/weights.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {

namespace {

constexpr const char* kExpected = "give a metrics file written by --metrics (CSV or JSON lines)";

using Record = std::map<std::string, double>;

// The file's lines without their line ends, numbered from 1; blank lines are kept (and skipped by
// the readers) so that the numbers in errors are the editor's.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// Whether a line holds nothing but spaces and tabs.
bool blank(const std::string& line) { return line.find_first_not_of(" \t") == std::string::npos; }

// A cell as a number: empty is NaN (the evaluation column off its steps); "nan" and "inf" are read
// as strtod reads them.
double cell_number(const std::string& cell, const std::string& where, const std::string& column) {
  if (cell.empty()) return std::nan("");
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  TROUPE_CHECK(end == cell.c_str() + cell.size(), io, where, ": column '", printable(column), "' holds '",
               printable(cell), "', which is not a number; ", kExpected);
  return v;
}

// CSV: a header (line `first`) naming the columns, step among them, then one row of as many cells
// per step.
void read_csv(const std::vector<std::string>& lines, std::size_t first, const std::string& path,
              std::vector<std::string>& names, std::map<std::int64_t, Record>& rows) {
  std::vector<std::string> header;
  std::istringstream hs(lines[first]);
  for (std::string h; std::getline(hs, h, ',');) header.push_back(h);
  const auto step_at = std::find(header.begin(), header.end(), "step");
  TROUPE_CHECK(step_at != header.end(), io, "'", path, "' line ", first + 1, ": the header has no 'step' column; ",
               kExpected);
  for (const std::string& h : header)  // (a column named twice is one column, its last cell counting)
    if (h != "step" && std::find(names.begin(), names.end(), h) == names.end()) names.push_back(h);
  for (std::size_t n = first + 1; n < lines.size(); ++n) {
    if (blank(lines[n])) continue;
    const std::string where = "'" + path + "' line " + std::to_string(n + 1);
    std::vector<std::string> cells;
    std::istringstream ls(lines[n]);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    if (lines[n].back() == ',') cells.emplace_back();  // getline drops an empty last cell
    TROUPE_CHECK(cells.size() == header.size(), io, where, ": ", cells.size(), " cells where the header names ",
                 header.size(), " columns; the file is damaged or was not written by --metrics");
    Record r;
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c] != "step") r[header[c]] = cell_number(cells[c], where, header[c]);
    const double step = cell_number(cells[static_cast<std::size_t>(step_at - header.begin())], where, "step");
    TROUPE_CHECK(std::floor(step) == step && std::abs(step) < 0x1p62, io, where,
                 ": the step is missing or not a whole number; ", kExpected);
    rows[static_cast<std::int64_t>(step)] = std::move(r);
  }
}

// `line` with each value written as nan, -nan, inf or -inf (what writers before non-finite values
// became null printed) replaced by null.
std::string non_finite_as_null(const std::string& line) {
  std::string out;
  for (std::size_t i = 0; i < line.size();) {
    out += line[i];
    if (line[i++] != ':') continue;
    std::size_t j = line.find_first_not_of(" \t", i);
    if (j != std::string::npos && line[j] == '-') ++j;
    for (const char* word : {"nan", "inf"})
      if (j != std::string::npos && line.compare(j, 3, word) == 0 && (j + 3 == line.size() || !std::isalnum(static_cast<unsigned char>(line[j + 3])))) {
        out += "null";
        i = j + 3;
      }
  }
  return out;
}

// One JSON line, its keys in the line's order; a line of an older writer with "nan" or "inf" has
// them read as null.
nlohmann::ordered_json parse_line(const std::string& line, const std::string& where) {
  try {
    return nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::ordered_json::exception&) {
  }
  try {
    return nlohmann::ordered_json::parse(non_finite_as_null(line));
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(ErrorKind::io, where, ": not a JSON object (", printable(e.what()), "); ", kExpected);
  }
}

// JSON lines: one object per step, with "step" and numbers (true/false for "skipped", null for none).
void read_json_lines(const std::vector<std::string>& lines, const std::string& path, std::vector<std::string>& names,
                     std::map<std::int64_t, Record>& rows) {
  for (std::size_t n = 0; n < lines.size(); ++n) {
    if (blank(lines[n])) continue;
    const std::string where = "'" + path + "' line " + std::to_string(n + 1);
    const nlohmann::ordered_json o = parse_line(lines[n], where);
    TROUPE_CHECK(o.is_object(), io, where, ": not a JSON object; ", kExpected);
    TROUPE_CHECK(o.contains("step") && o["step"].is_number_integer(), io, where, ": no integer \"step\"; ", kExpected);
    Record r;
    for (const auto& [key, value] : o.items()) {
      if (key == "step") continue;
      TROUPE_CHECK(value.is_number() || value.is_boolean() || value.is_null(), io, where, ": \"", printable(key),
                   "\" is not a number; ", kExpected);
      r[key] = value.is_null() ? std::nan("") : value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>();
      if (std::find(names.begin(), names.end(), key) == names.end()) names.push_back(key);
    }
    rows[o["step"].get<std::int64_t>()] = std::move(r);
  }
}

}  // namespace

MetricsSeries read_metrics(const std::string& path) {
  const std::vector<std::string> lines = lines_of(models::read_text_file(path, kExpected));
  const auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return !blank(l); });
  TROUPE_CHECK(first != lines.end(), io, "'", path, "' is empty; it fills as a run started with --metrics trains");
  MetricsSeries out;
  out.source = path;
  std::map<std::int64_t, Record> rows;  // by step: a later record of a step replaces the earlier
  if (first->at(first->find_first_not_of(" \t")) == '{') read_json_lines(lines, path, out.names, rows);
  else read_csv(lines, static_cast<std::size_t>(first - lines.begin()), path, out.names, rows);
  TROUPE_CHECK(!rows.empty(), io, "'", path, "' holds no steps yet; it fills as a run started with --metrics trains");
  for (const std::string& name : out.names) out.columns[name].reserve(rows.size());
  for (const auto& [step, record] : rows) {
    out.steps.push_back(step);
    for (const std::string& name : out.names) {
      const auto v = record.find(name);
      out.columns[name].push_back(v == record.end() ? std::nan("") : v->second);
    }
  }
  return out;
}

}  // namespace troupe::apps
