#pragma once
// GPT-2-family checkpoints in the Hugging Face layout, as the hub and save_pretrained keep them: a
// folder with config.json (n_embd, n_head, n_layer, n_positions, vocab_size, n_inner,
// layer_norm_epsilon, activation_function) and model.safetensors ("transformer.h.N.attn.c_attn.weight"
// or the same without "transformer.", Conv1D weights stored [in, out], the output head tied to wte).

#include <memory>
#include <string>

#include "troupe/models/gpt.hpp"

namespace troupe::models {

/// The shape of a GPT-2 checkpoint from its config.json text (`source` names it in errors); the
/// layer norms' epsilon in `eps`. Refuses an activation other than GPT-2's tanh GELU.
GptConfig gpt2_config(const std::string& config_json, const std::string& source, double& eps);

/// A GPT-2-family model from a Hugging Face checkpoint folder (any size of the family), in f32: the
/// weights transposed from Conv1D's [in, out] to Linear's [out, in], the head a copy of wte.
/// Errors name the file and the tensor.
std::unique_ptr<Gpt> load_gpt2(const std::string& dir);

}  // namespace troupe::models
