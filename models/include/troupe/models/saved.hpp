#pragma once
// The models as the applications save them, loaded for a service: a checkpoint folder of troupe-gpt
// or troupe-sr (--save; the model's shape comes from its state.json), or a bare .safetensors file
// (shaped by the config given). Every error names the file and says what to pass instead.

#include <memory>
#include <string>

#include "troupe/models/gpt.hpp"
#include "troupe/models/sr_lite.hpp"

namespace troupe::models {

/// gpt from a troupe-gpt checkpoint folder, or a .safetensors file (Troupe or nanoGPT names)
/// shaped by `config`.
std::unique_ptr<Gpt> load_gpt(const std::string& path, GptConfig config = {});

/// sr-lite from a troupe-sr checkpoint folder, or a .safetensors file shaped by `config`.
std::unique_ptr<SrLite> load_sr_lite(const std::string& path, SrConfig config = {});

}  // namespace troupe::models
