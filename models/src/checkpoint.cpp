#include "troupe/models/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::models {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";

// Flushes a file or folder to disk; rename() is only durable once both are synced.
void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  TROUPE_CHECK(fd >= 0, io, "cannot open '", p.string(), "' to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  TROUPE_CHECK(rc == 0, io, "cannot sync '", p.string(), "' to disk");
}

void write_synced(const fs::path& p, const std::string& text) {
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    TROUPE_CHECK(out.good(), io, "cannot write '", p.string(), "'");
  }
  fsync_path(p);
}

// The step of a save folder's name "step-<digits>", or -1 for any other name (".tmp" included).
std::int64_t step_of(const std::string& name) {
  const std::size_t n = std::strlen(kPrefix);
  if (name.size() <= n || name.size() > n + 18 || name.compare(0, n, kPrefix) != 0) return -1;
  std::int64_t step = 0;
  for (std::size_t i = n; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// A diverged run must not overwrite a good save with NaN or infinite weights (the loss that would
// reveal them is only computed by the next step), so every floating tensor is checked first.
void check_finite(const std::map<std::string, Tensor>& tensors, const char* what, std::int64_t step) {
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype())) continue;
    const std::vector<double> v = t.to(DType::f64).to_vector<double>();
    const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
    TROUPE_CHECK(bad == v.end(), runtime, "step ", step, ": the ", what, " tensor '", name, "' holds ", *bad,
                 "; training diverged, so this state was not saved (the last save is intact): lower --lr or clip harder");
  }
}

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

}  // namespace

std::int64_t CheckpointState::int_at(const std::string& key) const {
  auto it = ints.find(key);
  TROUPE_CHECK(it != ints.end(), io, "checkpoint '", source, "' has no '", key, "'; it was written by another program or version");
  return it->second;
}

const std::string& CheckpointState::string_at(const std::string& key) const {
  auto it = strings.find(key);
  TROUPE_CHECK(it != strings.end(), io, "checkpoint '", source, "' has no '", key, "'; it was written by another program or version");
  return it->second;
}

void save_checkpoint(const std::string& dir, std::int64_t step, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const CheckpointState& state, int keep) {
  check_finite(model, "model", step);
  check_finite(optimizer, "optimizer", step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TROUPE_CHECK(!ec, io, "cannot create the checkpoint folder '", dir, "': ", ec.message());
  const fs::path root(dir), final_dir = root / step_name(step), tmp = root / (step_name(step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  TROUPE_CHECK(!ec, io, "cannot create '", tmp.string(), "': ", ec.message());
  graph::save_safetensors((tmp / "model.safetensors").string(), model);
  graph::save_safetensors((tmp / "optimizer.safetensors").string(), optimizer);
  nlohmann::json j;
  j["ints"] = state.ints;
  j["strings"] = state.strings;
  write_synced(tmp / "state.json", j.dump(2));
  fsync_path(tmp);
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  TROUPE_CHECK(!ec, io, "cannot move the checkpoint into '", final_dir.string(), "': ", ec.message());
  // The pointer flips last: until this rename, "latest" names the previous complete checkpoint.
  write_synced(root / "latest.tmp", step_name(step) + "\n");
  fs::rename(root / "latest.tmp", root / "latest", ec);
  TROUPE_CHECK(!ec, io, "cannot update '", (root / "latest").string(), "': ", ec.message());
  fsync_path(root);

  // Retention by step number (names stop sorting by step past 8 digits). The save just written is
  // kept whatever its number: a run resumed from an earlier step must not delete its own save.
  std::vector<std::pair<std::int64_t, fs::path>> older;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && s != step && e.is_directory()) older.emplace_back(s, e.path());
  }
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)) - 1; i < older.size(); ++i) fs::remove_all(older[i].second, ec);
}

void prepare_save_folder(const std::string& dir, const std::string& resume) {
  std::error_code ec;
  const fs::path root(dir);
  TROUPE_CHECK(!fs::exists(root, ec) || fs::is_directory(root, ec), io, "--save '", dir,
               "' is a file; pass a folder for the checkpoints");
  bool holds_run = fs::exists(root / "latest", ec);
  for (const auto& e : fs::directory_iterator(root, ec)) holds_run = holds_run || step_of(e.path().filename().string()) >= 0;
  const bool same_run = !resume.empty() && fs::equivalent(root, resume, ec);
  TROUPE_CHECK(!holds_run || same_run, invalid_argument, "--save '", dir, "' already holds ",
               resume.empty() ? "a run" : "another run", "; continue it with --resume ", dir,
               ", or pass another --save folder");
  fs::create_directories(root, ec);
  TROUPE_CHECK(!ec, io, "cannot create the checkpoint folder '", dir, "': ", ec.message(),
               "; pass a --save folder you can write to");
  // A probe file, since permission bits alone say nothing for root or on read-only mounts.
  const fs::path probe = root / ".write-test.tmp";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int error = errno;
  if (fd >= 0) ::close(fd);
  fs::remove(probe, ec);
  TROUPE_CHECK(fd >= 0, io, "cannot write into the checkpoint folder '", dir, "': ", std::strerror(error),
               "; pass a --save folder you can write to");
}

Checkpoint load_checkpoint(const std::string& dir, const std::string& app) {
  const fs::path root(dir), pointer = root / "latest";
  std::ifstream latest(pointer);
  TROUPE_CHECK(latest.good() && !fs::is_directory(pointer), io, "'", dir,
               "' holds no checkpoint (no 'latest' file); pass the folder given to --save");
  std::string name;
  std::getline(latest, name);
  TROUPE_CHECK(step_of(name) >= 0, io, "'", pointer.string(), "' ",
               name.empty() ? "is empty" : "should name a step-<N> folder but holds '" + printable(name) + "'",
               "; write the name of the newest complete step-<N> folder of '", dir, "' into it");
  const fs::path folder = root / name;
  TROUPE_CHECK(fs::is_directory(folder), io, "'", pointer.string(), "' names '", name,
               "', which is missing; write the name of the newest complete step-<N> folder of '", dir, "' into it");
  Checkpoint c;
  c.folder = folder.string();
  c.state.source = (folder / "state.json").string();
  c.model = read_weights((folder / "model.safetensors").string(), "the checkpoint is incomplete");
  c.optimizer = read_weights((folder / "optimizer.safetensors").string(), "the checkpoint is incomplete");
  std::ifstream in(folder / "state.json");
  TROUPE_CHECK(in.good(), io, "checkpoint '", folder.string(), "' has no state.json");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    // Integers one by one: nlohmann would convert 1e300 or 2^64 - 1 to an int64 without a check.
    const nlohmann::json& ints = j.at("ints");
    TROUPE_CHECK(ints.is_object(), io, "checkpoint '", folder.string(), "' has a damaged state.json: 'ints' is not an object");
    for (const auto& [key, v] : ints.items()) {
      const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(INT64_MAX) : v.is_number_integer();
      TROUPE_CHECK(fits, io, "checkpoint '", folder.string(), "' has a damaged state.json: '", printable(key), "' is ",
                   printable(v.dump()), ", not an integer of 64 bits");
      c.state.ints[key] = v.get<std::int64_t>();
    }
    c.state.strings = j.at("strings").get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, "checkpoint '", folder.string(), "' has a damaged state.json: ", printable(e.what(), 400));
  }
  if (!app.empty())
    TROUPE_CHECK(c.state.string_at("app") == app, invalid_argument, "'", dir, "' is a checkpoint of ",
                 printable(c.state.string_at("app")), ", not of ", app);
  return c;
}

}  // namespace troupe::models
