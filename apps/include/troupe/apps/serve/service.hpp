#pragma once
// troupe-serve's routes over the HTTP server: the models it serves, their request queues, the
// limits on what a request may ask, and the metrics.
//   GET  /             a page to upload an image and to continue a prompt
//   GET  /healthz      {"status":"ok","models":[...]}
//   GET  /metrics      Prometheus text
//   POST /v1/upscale   a PNG in, the x2 PNG out (sr-lite)
//   POST /v1/generate  {"prompt","max_tokens","temperature","top_k","seed"} in,
//                      {"text","tokens","finish"} out (gpt, decoded with the key/value cache; a
//                      GPT-2 checkpoint reads and writes BPE tokens and finishes at <|endoftext|>)
//   GET  /v1/models      OpenAI's model list
//   POST /v1/completions OpenAI's completion body in, its completion object out, or with
//                        "stream": true Server-Sent Events ending in data: [DONE]
// Bad input gets 400 with {"error": ...} (OpenAI's error object on its routes); a route whose model
// is not loaded 404; a full queue 503 with Retry-After.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "troupe/apps/serve/http_server.hpp"
#include "troupe/apps/serve/metrics.hpp"
#include "troupe/troupe.hpp"

namespace troupe::apps::serve {

/// What to serve and how much a request may ask.
struct ServiceOptions {
  std::string sr_path;   // sr-lite: a checkpoint folder or a .safetensors file (shaped by `sr`); empty: none
  models::SrConfig sr;
  std::string gpt_path;  // gpt: a checkpoint folder or a .safetensors file (shaped by `gpt`); empty: none
  models::GptConfig gpt;
  std::string gpt2_path;  // or a GPT-2-family checkpoint folder with its tokenizer (models/gpt2.hpp); empty: none
  int jit_level = 3;
  graph::AmpOptions amp;
  int actor_threads = 2;                // scheduler threads of the programs, micro-batches of an upscale batch; 0: none
  std::int64_t max_pixels = 1 << 20;    // of an uploaded image
  std::int64_t max_prompt_bytes = 4096;
  std::int64_t max_tokens = 512;        // per generate request
  std::size_t queue_capacity = 64;      // per model; more waiting requests get 503
  int max_batch = 8;                    // requests run together
  std::chrono::milliseconds max_wait{5};  // for a batch to fill
};

/// The models, queues and routes; thread-safe.
class Service {
 public:
  /// Loads the models (throws troupe::Error naming the file when one cannot be loaded).
  explicit Service(const ServiceOptions& options);
  /// Answers everything queued, then stops.
  ~Service();
  /// The HTTP handler.
  void handle(const Request& request, Reply reply);
  /// Records one answered request (the server's observer).
  void observe(const Request& request, int status, double seconds);
  /// The metrics, as /metrics renders them.
  const Metrics& metrics() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// The HTML page of GET /.
const std::string& index_page();

}  // namespace troupe::apps::serve
