#pragma once
// Up-front memory estimates of the two training apps, so sizes that cannot fit (troupe-sr
// --patch 100000, a huge --batch, --seq or --d-model) are refused before anything is allocated,
// saying how much memory they would need, instead of dying of std::bad_alloc half-way.

#include <cstdint>
#include <string>

#include "troupe/apps/sr_data.hpp"
#include "troupe/models/gpt.hpp"
#include "troupe/models/sr_lite.hpp"

namespace troupe::apps {

/// This machine's physical memory in bytes.
double physical_memory_bytes();

/// A lower bound of what one troupe-gpt training step needs: weights, gradients, AdamW moments and
/// the activations kept for backward (attention scores and logits included).
double gpt_training_bytes(const models::GptConfig& config, std::int64_t batch);

/// A lower bound of what troupe-sr training needs: the step's activations, the held-out images,
/// weights, gradients and Adam moments.
double sr_training_bytes(const models::SrConfig& config, const SrDataOptions& data);

/// Throws when `bytes` exceed this machine's memory: "<what> would need at least N GiB ..., more
/// than this machine's M GiB; <advice>".
void require_memory(double bytes, const std::string& what, const std::string& advice);

}  // namespace troupe::apps
