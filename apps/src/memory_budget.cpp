#include "troupe/apps/memory_budget.hpp"

#include <unistd.h>

#include <cstdio>

#include "troupe/kernels/error.hpp"

namespace troupe::apps {

namespace {

constexpr double kFloat = 4;  // bytes of an f32

std::string gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
}

double gpt_training_bytes(const models::GptConfig& c, std::int64_t batch) {
  // Doubles throughout: the sizes come from flags and may be far beyond what an int64 product holds.
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff), v = static_cast<double>(c.vocab);
  const double seq = static_cast<double>(c.seq), layers = static_cast<double>(c.layers);
  const double params = 2 * v * d + seq * d + layers * (4 * d * d + 2 * d * ff + 9 * d + ff) + 2 * d;
  const double per_token = layers * (10 * d + 2 * ff + static_cast<double>(c.heads) * seq) + 2 * v;
  return kFloat * (4 * params + static_cast<double>(batch) * seq * per_token);
}

double sr_training_bytes(const models::SrConfig& c, const SrDataOptions& o) {
  const double ch = static_cast<double>(c.channels), blocks = static_cast<double>(c.blocks);
  const double r2 = static_cast<double>(c.upscale * c.upscale);
  const double side = static_cast<double>(o.patch) / static_cast<double>(c.upscale);
  const double params = 3 * 9 * ch + blocks * 2 * 9 * ch * ch + 9 * ch * 3 * r2;
  const double per_pixel = 3 + 2 * ch + 4 * ch * blocks + 9 * r2;  // low-resolution pixels of one patch
  const double held_out = o.folder.empty() ? static_cast<double>(o.held_out) * 3 * side * side * (1 + r2) : 0;
  return kFloat * (4 * params + static_cast<double>(o.batch) * side * side * per_pixel + held_out);
}

void require_memory(double bytes, const std::string& what, const std::string& advice) {
  const double have = physical_memory_bytes();
  TROUPE_CHECK(bytes <= have, invalid_argument, what, " would need at least ", gib(bytes),
               " of memory (weights, optimizer state and one step's activations), more than this machine's ", gib(have),
               "; ", advice);
}

}  // namespace troupe::apps
