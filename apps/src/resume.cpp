#include "troupe/apps/resume.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "troupe/kernels/error.hpp"

namespace troupe::apps {

namespace {

std::string shown(const std::string& value) { return value.empty() ? "(default)" : printable(value); }

bool same_path(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return a == b;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return ea || eb ? a == b : ca == cb;
}

}  // namespace

std::string exact_text(double v) {
  char buf[32];
  const auto [end, error] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

ResumeSettings::ResumeSettings(CLI::App& app, const models::CheckpointState& state) : app_(app), state_(state) {}

void ResumeSettings::agree(const std::string& flag, const std::string& key, bool same, const std::string& stored) {
  if (app_.count(flag) == 0) {
    from_checkpoint_.push_back(flag + " " + shown(stored));
    return;
  }
  TROUPE_CHECK(same, invalid_argument, flag, " ", app_.get_option(flag)->as<std::string>(),
               " contradicts the checkpoint '", state_.source, "' (", key, " ", shown(stored), "); drop ", flag,
               " to use the checkpoint's value (its model, data and batch cannot change)");
}

void ResumeSettings::check_range(const std::string& flag, const std::string& key, const std::string& text) {
  CLI::Validator* range = nullptr;
  try {
    range = app_.get_option(flag)->get_validator();
  } catch (const CLI::OptionNotFound&) {
    return;  // a flag without a range
  }
  const std::string problem = (*range)(text);
  TROUPE_CHECK(problem.empty(), invalid_argument, "checkpoint '", state_.source, "' holds ", key, " ", text, ", which ",
               flag, " does not accept (", problem, "); the file is damaged or from another version");
}

void ResumeSettings::take(const std::string& flag, const std::string& key, std::int64_t& value) {
  const std::int64_t stored = state_.int_at(key);
  check_range(flag, key, std::to_string(stored));
  agree(flag, key, value == stored, std::to_string(stored));
  value = stored;
}

void ResumeSettings::take_divided(const std::string& flag, const std::string& key, std::int64_t parts, std::int64_t& value) {
  const std::int64_t stored = state_.int_at(key);
  TROUPE_CHECK(parts >= 1 && stored > 0 && stored % parts == 0, invalid_argument, "the checkpoint '", state_.source,
               "' was saved at ", key, " ", stored, ", which does not split among ", parts,
               " data-parallel replicas; resume with a --dp that divides ", stored);
  const std::int64_t share = stored / parts;
  check_range(flag, key, std::to_string(share));
  agree(flag, key, value == share, std::to_string(share));
  value = share;
}

void ResumeSettings::take(const std::string& flag, const std::string& key, std::uint64_t& value) {
  const auto stored = static_cast<std::uint64_t>(state_.int_at(key));  // stored as the int64 of the same bits
  agree(flag, key, value == stored, std::to_string(stored));
  value = stored;
}

void ResumeSettings::take(const std::string& flag, const std::string& key, double& value) {
  const std::string& text = state_.string_at(key);
  char* end = nullptr;
  const double stored = std::strtod(text.c_str(), &end);
  TROUPE_CHECK(!text.empty() && end && *end == '\0', invalid_argument, "checkpoint '", state_.source, "' holds ", key,
               " '", printable(text), "', which is not a number; the file is damaged or from another version");
  check_range(flag, key, text);
  agree(flag, key, value == stored, text);
  value = stored;
}

void ResumeSettings::take(const std::string& flag, const std::string& key, std::string& value, bool is_path) {
  const std::string& stored = state_.string_at(key);
  agree(flag, key, is_path ? same_path(value, stored) : value == stored, stored);
  value = stored;
}

void ResumeSettings::settle_lr(std::map<std::string, Tensor>& optimizer_state, double lr) {
  const auto saved = optimizer_state.find("group0.lr");
  if (saved == optimizer_state.end() || saved->second.numel() != 1) return;  // (loading the state names what is wrong)
  const double had = saved->second.item();
  char buf[96];
  if (app_.count("--lr") == 0) {
    std::snprintf(buf, sizeof buf, "--lr %g", had);
    from_checkpoint_.push_back(buf);
    return;
  }
  std::snprintf(buf, sizeof buf, "--lr %g (the checkpoint had %g)", lr, had);
  from_flags_.push_back(buf);
  for (auto& [key, value] : optimizer_state)
    if (key.rfind("group", 0) == 0 && key.size() > 3 && key.compare(key.size() - 3, 3, ".lr") == 0)
      value = Tensor::scalar(lr, DType::f64);
}

void ResumeSettings::settle_peak_lr(const std::string& key, double& lr) {
  if (app_.count("--lr") == 0) {
    take("--lr", key, lr);
    return;
  }
  const double had = std::strtod(state_.string_at(key).c_str(), nullptr);
  char buf[96];
  std::snprintf(buf, sizeof buf, "--lr %g (the checkpoint had %g)", lr, had);
  from_flags_.push_back(buf);
}

std::string ResumeSettings::summary() const {
  auto join = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
  };
  std::string out = "from the checkpoint: " + join(from_checkpoint_);
  if (!from_flags_.empty()) out += "; from the flags: " + join(from_flags_);
  return out;
}

}  // namespace troupe::apps
