#include "apps/app_runner.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace troupe::test {

nlohmann::json AppRun::last_json() const {
  const auto ls = lines();
  for (auto it = ls.rbegin(); it != ls.rend(); ++it) {
    if (it->empty() || (*it)[0] != '{') continue;
    try {
      return nlohmann::json::parse(*it);
    } catch (const nlohmann::json::exception&) {
    }
  }
  return nullptr;
}

std::vector<std::string> AppRun::lines() const {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

AppRun run_app(const std::string& command) {
  AppRun r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_clear_failures(const std::vector<BadInput>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.command);
    // stderr alone (stdout dropped): the error must be exactly one line.
    AppRun r;
    FILE* p = popen(("{ " + c.command + " ; } 2>&1 >/dev/null").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
    EXPECT_EQ(r.lines().size(), 1u) << "not one line on stderr:\n" << r.output;
    EXPECT_NE(r.output.rfind('\n'), std::string::npos);
  }
}

std::string fresh_dir(const std::string& tag) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("troupe_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<double> csv_column(const std::string& path, const std::string& column) {
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  std::vector<std::string> names;
  std::istringstream hs(header);
  for (std::string h; std::getline(hs, h, ',');) names.push_back(h);
  std::size_t index = 0;
  while (index < names.size() && names[index] != column) ++index;
  std::vector<double> values;
  if (index == names.size()) return values;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string cell;
    std::size_t k = 0;
    while (k <= index && std::getline(ls, cell, ',')) ++k;
    values.push_back(k <= index || cell.empty() ? std::nan("") : std::stod(cell));  // a trailing empty cell is absent
  }
  return values;
}

}  // namespace troupe::test
