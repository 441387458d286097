// troupe-serve's routes: request parsing and limits, one batching queue per model, the workers'
// inference, and the answers.
#include "troupe/apps/serve/service.hpp"

#include <atomic>
#include <filesystem>
#include <limits>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "troupe/apps/image.hpp"
#include "troupe/apps/serve/batch_queue.hpp"
#include "troupe/troupe.hpp"

namespace troupe::apps::serve {

namespace {

using graph::Var;
using Clock = std::chrono::steady_clock;

const char* const kRoutes = "GET /, /healthz, /metrics, /v1/models; POST /v1/upscale, /v1/generate, /v1/completions";

struct UpscaleJob {
  Tensor image;  // [3, H, W]
  Reply reply;
};

struct GenerateJob {
  std::vector<std::int64_t> prompt;
  std::int64_t max_tokens = 64, top_k = 40;
  double temperature = 0.8, top_p = 1.0;
  std::uint64_t seed = 1;
  std::vector<std::string> stop;  // the text ends before the first of these it comes to ("finish": "stop")
  bool echo = false;              // the answer's text starts with the prompt
  bool logprobs = false;          // each token's log-probability, and the most likely token's
  bool openai = false;            // answered as an OpenAI completion object (/v1/completions)
  bool stream = false;            // answered as Server-Sent Events, a chunk per token
  std::string prompt_text, model, id;
  std::int64_t created = 0;       // unix seconds
  Clock::time_point arrived = Clock::now();
  Reply reply;
};

Response method_not_allowed(const std::string& allowed) {
  Response r = json_error(405, "use " + allowed + " here");
  r.headers.emplace_back("Allow", allowed);
  return r;
}

Response busy(const char* model, std::size_t waiting) {
  Response r = json_error(503, std::string("the ") + model + " queue is full (" + std::to_string(waiting) +
                                   " requests waiting); retry in a moment");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

// A request body as a JSON object with only `known` fields; one clear error for the first thing wrong.
nlohmann::json request_object(const std::string& body, const std::set<std::string>& known) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::invalid_argument, "the body is not JSON (", e.what(), "); send {\"prompt\": \"...\"}");
  }
  TROUPE_CHECK(j.is_object(), invalid_argument, "the body must be a JSON object, as {\"prompt\": \"...\"}");
  std::string names;
  for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
  for (const auto& [key, value] : j.items())
    TROUPE_CHECK(known.count(key), invalid_argument, "unknown field '", key, "'; the fields are ", names);
  return j;
}

// The job's prompt: its bytes, or a GPT-2 tokenizer's tokens when one is given.
void take_prompt(const nlohmann::json& j, const ServiceOptions& o, const models::Gpt2Tokenizer* tokenizer, GenerateJob& job) {
  TROUPE_CHECK(j.contains("prompt") && j["prompt"].is_string(), invalid_argument, "'prompt' must be a string");
  const std::string prompt = j["prompt"];
  TROUPE_CHECK(static_cast<std::int64_t>(prompt.size()) <= o.max_prompt_bytes, invalid_argument, "the prompt has ",
               prompt.size(), " bytes, more than the limit of ", o.max_prompt_bytes);
  job.prompt_text = prompt;
  if (tokenizer) {
    job.prompt = tokenizer->encode(prompt);
    if (job.prompt.empty() && tokenizer->end_of_text()) job.prompt.push_back(*tokenizer->end_of_text());
    TROUPE_CHECK(!job.prompt.empty(), invalid_argument, "the prompt is empty and the model has no <|endoftext|> to start from");
  } else {
    for (unsigned char c : prompt) job.prompt.push_back(c);
    if (job.prompt.empty()) job.prompt.push_back('\n');
  }
}

// The sampling fields both routes take: max_tokens, temperature, top_k, top_p, seed.
void take_sampling(const nlohmann::json& j, const ServiceOptions& o, GenerateJob& job) {
  const auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
    if (!j.contains(key)) return;
    TROUPE_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= lo && j[key].get<std::int64_t>() <= hi,
                 invalid_argument, "'", key, "' must be an integer from ", lo, " to ", hi);
    out = j[key].get<std::int64_t>();
  };
  integer("max_tokens", 1, o.max_tokens, job.max_tokens);
  job.max_tokens = std::min(job.max_tokens, o.max_tokens);
  integer("top_k", 0, 1 << 24, job.top_k);
  std::int64_t seed = 1;
  integer("seed", 0, std::numeric_limits<std::int64_t>::max(), seed);
  job.seed = static_cast<std::uint64_t>(seed);
  if (j.contains("temperature")) {
    TROUPE_CHECK(j["temperature"].is_number() && j["temperature"].get<double>() >= 0 && j["temperature"].get<double>() <= 100,
                 invalid_argument, "'temperature' must be a number from 0 (greedy) to 100");
    job.temperature = j["temperature"];
  }
  if (j.contains("top_p")) {
    TROUPE_CHECK(j["top_p"].is_number() && j["top_p"].get<double>() > 0 && j["top_p"].get<double>() <= 1, invalid_argument,
                 "'top_p' must be a number above 0 and at most 1");
    job.top_p = j["top_p"];
  }
}

// POST /v1/generate: {"prompt","max_tokens","temperature","top_k","top_p","seed"}.
GenerateJob parse_generate(const std::string& body, const ServiceOptions& o, const models::Gpt2Tokenizer* tokenizer) {
  const nlohmann::json j = request_object(body, {"prompt", "max_tokens", "temperature", "top_k", "top_p", "seed"});
  GenerateJob job;
  take_prompt(j, o, tokenizer, job);
  take_sampling(j, o, job);
  return job;
}

// POST /v1/completions, OpenAI's body: prompt (one string), max_tokens (16), temperature (1),
// top_p, top_k, stop (a string or up to 4), seed, echo, logprobs (0 or 1), n (1), stream (false:
// streaming is not built yet), model (the one served), user; penalties only at 0.
GenerateJob parse_completion(const std::string& body, const ServiceOptions& o, const models::Gpt2Tokenizer* tokenizer,
                             const std::string& model) {
  const nlohmann::json j = request_object(body, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "stop",
                                                 "seed", "echo", "logprobs", "n", "stream", "user", "presence_penalty",
                                                 "frequency_penalty"});
  TROUPE_CHECK(!j.contains("model") || (j["model"].is_string() && j["model"] == model), invalid_argument,
               "'model' must be \"", model, "\", the model this server serves (GET /v1/models)");
  TROUPE_CHECK(!j.contains("prompt") || j["prompt"].is_string(), invalid_argument,
               "'prompt' must be one string (lists of prompts are not taken: send one request each)");
  TROUPE_CHECK(!j.contains("n") || j["n"] == 1, invalid_argument, "'n' must be 1: one completion per request");
  TROUPE_CHECK(!j.contains("stream") || j["stream"].is_boolean(), invalid_argument, "'stream' must be true or false");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"})
    TROUPE_CHECK(!j.contains(penalty) || (j[penalty].is_number() && j[penalty].get<double>() == 0), invalid_argument, "'",
                 penalty, "' must be 0: penalties are not applied");
  static std::atomic<std::uint64_t> next_id{1};
  GenerateJob job;
  job.openai = true;
  job.model = model;
  job.id = "cmpl-" + std::to_string(next_id++);
  job.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  job.stream = j.value("stream", false);
  job.max_tokens = 16;
  job.temperature = 1.0;
  job.top_k = 0;
  nlohmann::json with_prompt = j;
  if (!with_prompt.contains("prompt")) with_prompt["prompt"] = "";
  take_prompt(with_prompt, o, tokenizer, job);
  take_sampling(j, o, job);
  if (j.contains("stop") && !j["stop"].is_null()) {
    const nlohmann::json stops = j["stop"].is_array() ? j["stop"] : nlohmann::json::array({j["stop"]});
    TROUPE_CHECK(stops.size() <= 4, invalid_argument, "'stop' takes at most 4 sequences");
    for (const auto& s : stops) {
      TROUPE_CHECK(s.is_string() && !s.get<std::string>().empty(), invalid_argument, "'stop' must be a non-empty string or a list of them");
      job.stop.push_back(s.get<std::string>());
    }
  }
  TROUPE_CHECK(!j.contains("echo") || j["echo"].is_boolean(), invalid_argument, "'echo' must be true or false");
  job.echo = j.value("echo", false);
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    TROUPE_CHECK(j["logprobs"].is_number_integer() && j["logprobs"].get<std::int64_t>() >= 0 && j["logprobs"].get<std::int64_t>() <= 1,
                 invalid_argument, "'logprobs' must be 0 or 1: the chosen token's and the most likely one's");
    job.logprobs = true;
  }
  TROUPE_CHECK(!(job.stream && job.logprobs), invalid_argument,
               "'logprobs' are not streamed; ask for them with \"stream\": false");
  return job;
}

// An error in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, for its routes.
Response openai_error(int status, const std::string& message) {
  const char* type = status >= 500 ? "server_error" : status == 404 ? "not_found_error" : "invalid_request_error";
  const nlohmann::json body{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  return Response{status, "application/json", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", {}};
}

// OpenAI's completion object for /v1/completions: the whole answer, or (stream) one event's chunk
// of text; `why` null while the text goes on.
nlohmann::json completion_object(const GenerateJob& job, const std::string& text, const char* why,
                                 const nlohmann::json& logprobs) {
  const nlohmann::json choice{{"text", text},
                              {"index", 0},
                              {"logprobs", job.logprobs ? logprobs : nlohmann::json(nullptr)},
                              {"finish_reason", why ? nlohmann::json(why) : nlohmann::json(nullptr)}};
  return {{"id", job.id}, {"object", "text_completion"}, {"created", job.created}, {"model", job.model},
          {"choices", nlohmann::json::array({choice})}};
}

// The usage object: tokens read and written.
nlohmann::json usage_object(const GenerateJob& job, std::int64_t tokens) {
  const auto prompt_tokens = static_cast<std::int64_t>(job.prompt.size());
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", tokens}, {"total_tokens", prompt_tokens + tokens}};
}

// One Server-Sent Event carrying `data`.
std::string event(const nlohmann::json& data) {
  return "data: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

// The end of `text`'s longest prefix, up to `end`, that does not stop inside a UTF-8 character: a
// streamed chunk never splits one (a token may hold part of a character).
std::size_t whole_characters(const std::string& text, std::size_t end) {
  for (std::size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto b = static_cast<unsigned char>(text[end - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const std::size_t length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return length > back && b >= 0xC0 ? end - back : end;
  }
  return end;
}

}  // namespace

struct Service::Impl {
  explicit Impl(const ServiceOptions& o) : options(o) {}

  // Upscales a batch: images of one size run together as one [B, 3, H, W] call.
  void upscale_batch(std::vector<UpscaleJob>& batch) {
    metrics.set_queue_depth(static_cast<std::int64_t>(depth()));
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<UpscaleJob*>> by_size;
    for (UpscaleJob& job : batch) by_size[{job.image.size(1), job.image.size(2)}].push_back(&job);
    for (auto& [size, jobs] : by_size) {
      metrics.observe_batch("/v1/upscale", static_cast<int>(jobs.size()));
      try {
        graph::NoGradGuard no_grad;  // eager at JIT level 0: no tape
        const auto b = static_cast<std::int64_t>(jobs.size());
        Tensor images = Tensor::empty({b, 3, size.first, size.second});
        for (std::int64_t i = 0; i < b; ++i) images.slice(0, i, i + 1).copy_from(jobs[i]->image.unsqueeze(0));
        const Tensor out = upscale_program ? upscale_program->run({images}).outputs[0] : (*upscale)({images})[0];
        for (std::int64_t i = 0; i < b; ++i)
          jobs[i]->reply(Response{200, "image/png", encode_png(out.slice(0, i, i + 1).reshape({3, out.size(2), out.size(3)})), {}});
      } catch (const std::exception& e) {
        for (UpscaleJob* job : jobs) job->reply(json_error(500, std::string("upscaling failed: ") + e.what()));
      }
    }
  }

  // Generates for the batch's requests together, with continuous batching: every row advances by
  // one traced step per token; a finished request answers at once and leaves, and the requests
  // that came meanwhile join before the next step (their prompts first, those of one length
  // together). A row whose context fills the model's positions goes on beside the batch,
  // recomputing its sliding window one token per step.
  void generate_batch(std::vector<GenerateJob>& batch, BatchQueue<GenerateJob>& queue) {
    struct Row {
      GenerateJob job;
      std::vector<std::int64_t> context;
      std::string text;
      std::int64_t tokens = 0;  // generated so far
      std::uint64_t rng;
      nlohmann::json logprobs;    // with job.logprobs: OpenAI's tokens, token_logprobs, top_logprobs, text_offset
      std::shared_ptr<ResponseStream> out;  // with job.stream: the events so far went here
      std::size_t sent = 0;       // of the text, streamed
      Clock::time_point first, last;  // when its first and latest tokens came
      std::vector<float> logits;  // of the next token, once the row's prompt or step has run
      bool answered = false;
    };
    std::list<Row> rows;          // every request taken, answered or not
    std::vector<Row*> active;     // the decoder's rows, in its order
    std::vector<Row*> windowed;   // past the model's positions
    const std::int64_t seq = gpt->config.seq;
    // The token that ends a text (GPT-2's <|endoftext|>), or -1: no sampled token is negative.
    const std::int64_t end = tokenizer ? tokenizer->end_of_text().value_or(-1) : -1;
    const auto token_text = [&](std::int64_t token) {
      return tokenizer ? tokenizer->token_bytes(token) : std::string(1, static_cast<char>(token));
    };
    // A stream's text so far as events, holding back what a stop sequence could still claim and a
    // character's first bytes (all of it once `last`).
    const auto flush = [&](Row& r, bool last) {
      std::size_t hold = 0;
      for (const std::string& stop : r.job.stop) hold = std::max(hold, stop.size() - 1);
      const std::size_t upto = last ? r.text.size() : whole_characters(r.text, r.text.size() - std::min(hold, r.text.size()));
      if (upto <= r.sent) return;
      r.out->send(event(completion_object(r.job, r.text.substr(r.sent, upto - r.sent), nullptr, nullptr)));
      r.sent = upto;
    };
    const auto finish = [&](Row& r, const char* why) {
      r.answered = true;
      if (r.tokens > 1) metrics.observe_time_per_token(std::chrono::duration<double>(r.last - r.first).count() / static_cast<double>(r.tokens - 1));
      if (r.out) {
        flush(r, true);
        nlohmann::json last = completion_object(r.job, "", why, nullptr);
        last["usage"] = usage_object(r.job, r.tokens);
        r.out->send(event(last));
        r.out->send("data: [DONE]\n\n");
        r.out->end();
        return;
      }
      nlohmann::json answer{{"text", r.text}, {"tokens", r.tokens}, {"finish", why}};
      if (r.job.openai) {
        answer = completion_object(r.job, (r.job.echo ? r.job.prompt_text : "") + r.text, why, r.logprobs);
        answer["usage"] = usage_object(r.job, r.tokens);
      }
      r.job.reply(Response{200, "application/json", answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", {}});
    };
    // Samples the row's next token; false once it has all it asked for or ended (and is answered).
    const auto advance = [&](Row& r) {
      if (r.out ? r.out->cancelled() : r.job.reply.gone()) {  // the client went away: the row leaves, its slot is free
        r.answered = true;
        metrics.observe_cancelled();
        // (nginx's 499: written to nobody, it ends the request, so the server does not wait for it)
        if (!r.out) r.job.reply(json_error(499, "the client closed the connection before the answer"));
        return false;
      }
      const std::int64_t token = models::sample_token(r.logits, r.job.temperature, r.job.top_k, r.rng, r.job.top_p);
      if (token == end) {
        finish(r, "stop");
        return false;
      }
      const Clock::time_point now = Clock::now();
      metrics.observe_token(r.tokens == 0, std::chrono::duration<double>(now - (r.tokens == 0 ? r.job.arrived : r.last)).count());
      if (r.tokens == 0) r.first = now;
      r.last = now;
      r.context.push_back(token);
      const std::size_t before = r.text.size();
      const std::string piece = token_text(token);
      r.text += piece;
      ++r.tokens;
      if (r.job.logprobs) {
        const auto best = std::max_element(r.logits.begin(), r.logits.end()) - r.logits.begin();
        r.logprobs["tokens"].push_back(piece);
        r.logprobs["token_logprobs"].push_back(models::token_logprob(r.logits, token));
        r.logprobs["top_logprobs"].push_back({{token_text(best), models::token_logprob(r.logits, best)}});
        r.logprobs["text_offset"].push_back(before + (r.job.echo ? r.job.prompt_text.size() : 0));
      }
      // A stop sequence ends the text before it; it may have begun in an earlier token.
      for (const std::string& stop : r.job.stop) {
        const std::size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
        const std::size_t at = r.text.find(stop, from);
        if (at == std::string::npos) continue;
        r.text.resize(at);
        finish(r, "stop");
        return false;
      }
      if (r.tokens >= r.job.max_tokens) {
        finish(r, "length");
        return false;
      }
      if (r.out) flush(r, false);
      return true;
    };
    const auto admit = [&](std::vector<GenerateJob>& jobs) {
      std::vector<Row*> joining;
      for (GenerateJob& job : jobs) {
        Row& r = rows.emplace_back(Row{std::move(job), {}, "", 0, 0, nlohmann::json::object(), nullptr, 0, {}, {}, {}});
        r.context = r.job.prompt;
        r.rng = r.job.seed;
        if (r.job.stream) {
          r.out = r.job.reply.stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
          if (r.job.echo) r.out->send(event(completion_object(r.job, r.job.prompt_text, nullptr, nullptr)));
        }
        (static_cast<std::int64_t>(r.context.size()) <= seq ? joining : windowed).push_back(&r);
      }
      if (joining.empty()) return;
      std::vector<std::vector<std::int64_t>> prompts;
      for (Row* r : joining) prompts.push_back(r->context);
      std::vector<std::vector<float>> logits = decoder->add(prompts);
      for (std::size_t i = 0; i < joining.size(); ++i) joining[i]->logits = std::move(logits[i]);
      active.insert(active.end(), joining.begin(), joining.end());
    };
    try {
      graph::NoGradGuard no_grad;
      admit(batch);
      while (!active.empty() || !windowed.empty()) {
        metrics.set_queue_depth(static_cast<std::int64_t>(depth()));
        std::vector<std::int64_t> tokens;
        std::vector<bool> keep;
        std::vector<Row*> still;
        for (Row* r : active) {
          const bool more = advance(*r), room = more && static_cast<std::int64_t>(r->context.size()) <= seq;
          if (more && !room) windowed.push_back(r);
          keep.push_back(room);
          if (room) {
            tokens.push_back(r->context.back());
            still.push_back(r);
          }
        }
        decoder->keep_rows(keep);
        active = still;
        if (!active.empty()) {
          metrics.observe_batch("/v1/generate", static_cast<int>(active.size()));
          std::vector<std::vector<float>> logits = decoder->step(tokens);
          for (std::size_t i = 0; i < active.size(); ++i) active[i]->logits = std::move(logits[i]);
        }
        std::vector<Row*> going;
        for (Row* r : windowed) {
          r->logits = window_decoder->next(r->context);
          if (advance(*r)) going.push_back(r);
        }
        windowed = going;
        rows.remove_if([](const Row& r) { return r.answered; });
        metrics.set_running(static_cast<std::int64_t>(active.size() + windowed.size()));
        const std::size_t held = active.size() + windowed.size();
        std::vector<GenerateJob> joining = queue.take_waiting(queue.max_batch() - std::min(held, queue.max_batch()));
        if (!joining.empty()) admit(joining);
      }
    } catch (const std::exception& e) {
      for (Row& r : rows) {
        if (r.answered) continue;
        const std::string why = std::string("generation failed: ") + e.what();
        if (!r.out) r.job.reply(r.job.openai ? openai_error(500, why) : json_error(500, why));
        else r.out->send(event(nlohmann::json::parse(openai_error(500, why).body)));
        if (r.out) r.out->end();
      }
      metrics.set_running(0);
      decoder->keep_rows(std::vector<bool>(decoder->positions().size(), false));
    }
  }

  std::size_t depth() const {
    return (upscale_queue ? upscale_queue->depth() : 0) + (generate_queue ? generate_queue->depth() : 0);
  }

  ServiceOptions options;
  Metrics metrics;
  std::unique_ptr<models::SrLite> sr;
  // Upscale batches and decoding steps run as actor programs (an upscale batch split into
  // micro-batches that flow through the op actors concurrently); at JIT level 0, or with no actor
  // threads, the worker calls the traced function itself.
  std::unique_ptr<actors::Engine> engine;
  std::unique_ptr<actors::Program> upscale_program;
  std::unique_ptr<graph::Jit> upscale;
  std::unique_ptr<models::Gpt> gpt;
  std::optional<models::Gpt2Tokenizer> tokenizer;      // a GPT-2 checkpoint's; none: gpt reads and writes bytes
  std::string model_name;                             // the language model's, in /v1/models and completions
  std::unique_ptr<models::GptDecoder> decoder;         // the generate worker's batch, with the key/value cache
  std::unique_ptr<models::GptDecoder> window_decoder;  // its rows past the model's positions
  // Declared last, destroyed first: their workers finish what is queued while the models exist.
  std::unique_ptr<BatchQueue<UpscaleJob>> upscale_queue;
  std::unique_ptr<BatchQueue<GenerateJob>> generate_queue;
};

Service::Service(const ServiceOptions& o) : impl_(std::make_unique<Impl>(o)) {
  Impl& s = *impl_;
  TROUPE_CHECK(o.gpt_path.empty() || o.gpt2_path.empty(), invalid_argument,
               "serve one language model: --gpt (a troupe-gpt model) or --model (a GPT-2 checkpoint), not both");
  if (o.jit_level > 0 && o.actor_threads > 0 && (!o.sr_path.empty() || !o.gpt_path.empty() || !o.gpt2_path.empty()))
    s.engine = std::make_unique<actors::Engine>(actors::EngineOptions{static_cast<std::size_t>(o.actor_threads)});
  if (!o.sr_path.empty()) {
    s.sr = models::load_sr_lite(o.sr_path, o.sr);
    const graph::SymDim b = graph::SymDim::symbol("batch"), h = graph::SymDim::symbol("height"), w = graph::SymDim::symbol("width");
    const graph::TraceableFn fn = [&s](const std::vector<Var>& in) { return std::vector<Var>{(*s.sr)(in[0])}; };
    const std::vector<graph::InputSpec> signature{{"image", {b, 3, h, w}}};
    if (s.engine) {
      actors::ProgramOptions po;
      po.micro_batches = o.actor_threads;
      s.upscale_program =
          s.engine->compile(graph::trace(fn, signature).with_amp(o.amp).for_inference().optimized(o.jit_level), po);
    } else {
      s.upscale = std::make_unique<graph::Jit>(fn, signature, false, o.jit_level, o.amp);
    }
    s.upscale_queue = std::make_unique<BatchQueue<UpscaleJob>>(
        o.queue_capacity, o.max_batch, o.max_wait, 1,
        [&s](std::vector<UpscaleJob>& batch, BatchQueue<UpscaleJob>&) { s.upscale_batch(batch); });
  }
  if (!o.gpt2_path.empty()) {
    s.gpt = models::load_gpt2(o.gpt2_path);
    s.tokenizer = models::Gpt2Tokenizer::load(o.gpt2_path);
    TROUPE_CHECK(s.tokenizer->vocab_size() <= s.gpt->config.vocab, invalid_argument, "'", o.gpt2_path, "': the tokenizer has ",
                 s.tokenizer->vocab_size(), " tokens but the model only ", s.gpt->config.vocab,
                 " (vocab_size); vocab.json belongs to another model");
  } else if (!o.gpt_path.empty()) {
    s.gpt = models::load_gpt(o.gpt_path, o.gpt);
    TROUPE_CHECK(s.gpt->config.vocab == 256, invalid_argument, "'", o.gpt_path, "' is a model of ", s.gpt->config.vocab,
                 " tokens; troupe-serve generates bytes (256); a GPT-2 checkpoint goes to --model");
  }
  if (s.gpt) {
    // A GPT-2 checkpoint goes by its folder's name ("gpt2", "gpt2-medium"), as clients name hub models.
    const std::filesystem::path folder = std::filesystem::path(o.gpt2_path).lexically_normal();
    const std::string last = (folder.has_filename() ? folder : folder.parent_path()).filename().string();
    s.model_name = s.tokenizer ? (last.empty() ? "gpt2" : last) : "gpt";
    s.decoder = std::make_unique<models::GptDecoder>(*s.gpt, o.amp, true);
    // A decoding step is a chain of small ops: its rows stay one micro-batch.
    if (s.engine) s.decoder->run_steps_on(*s.engine, 1);
    s.window_decoder = std::make_unique<models::GptDecoder>(*s.gpt, o.amp, false);
    s.generate_queue = std::make_unique<BatchQueue<GenerateJob>>(
        o.queue_capacity, o.max_batch, o.max_wait, 1,
        [&s](std::vector<GenerateJob>& batch, BatchQueue<GenerateJob>& queue) { s.generate_batch(batch, queue); });
  }
}

Service::~Service() = default;

const Metrics& Service::metrics() const { return impl_->metrics; }

void Service::observe(const Request& request, int status, double seconds) {
  static const std::set<std::string> routes{"/", "/healthz", "/metrics", "/v1/upscale", "/v1/generate", "/v1/completions",
                                            "/v1/models"};
  impl_->metrics.observe_request(routes.count(request.target) ? request.target : "other", status, seconds);
}

void Service::handle(const Request& r, Reply reply) {
  Impl& s = *impl_;
  const auto only = [&](const char* method) {
    if (r.method == method) return true;
    reply(method_not_allowed(method));
    return false;
  };
  if (r.target == "/") {
    if (only("GET")) reply(Response{200, "text/html; charset=utf-8", index_page(), {}});
  } else if (r.target == "/healthz") {
    if (!only("GET")) return;
    nlohmann::json models = nlohmann::json::array();
    if (s.sr) models.push_back("sr-lite");
    if (s.gpt) models.push_back(s.tokenizer ? "gpt2" : "gpt");
    reply(Response{200, "application/json", nlohmann::json{{"status", "ok"}, {"models", models}}.dump() + "\n", {}});
  } else if (r.target == "/metrics") {
    if (only("GET")) reply(Response{200, "text/plain; version=0.0.4", s.metrics.prometheus(), {}});
  } else if (r.target == "/v1/upscale") {
    if (!only("POST")) return;
    if (!s.upscale_queue) return reply(json_error(404, "this server has no sr-lite model; start it with --sr"));
    UpscaleJob job;
    try {
      job.image = decode_png(r.body, "the request body", s.options.max_pixels);
    } catch (const Error& e) {
      return reply(json_error(400, e.what()));
    }
    job.reply = reply;
    if (!s.upscale_queue->try_push(job)) return reply(busy("upscale", s.upscale_queue->depth()));
    s.metrics.set_queue_depth(static_cast<std::int64_t>(s.depth()));
  } else if (r.target == "/v1/generate") {
    if (!only("POST")) return;
    if (!s.generate_queue) return reply(json_error(404, "this server has no language model; start it with --gpt or --model"));
    GenerateJob job;
    try {
      job = parse_generate(r.body, s.options, s.tokenizer ? &*s.tokenizer : nullptr);
    } catch (const Error& e) {
      return reply(json_error(400, e.what()));
    }
    job.reply = reply;
    if (!s.generate_queue->try_push(job)) return reply(busy("generate", s.generate_queue->depth()));
    s.metrics.set_queue_depth(static_cast<std::int64_t>(s.depth()));
  } else if (r.target == "/v1/models") {
    if (!only("GET")) return;
    nlohmann::json data = nlohmann::json::array();
    if (s.gpt) data.push_back({{"id", s.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}});
    reply(Response{200, "application/json", nlohmann::json{{"object", "list"}, {"data", data}}.dump() + "\n", {}});
  } else if (r.target == "/v1/completions") {
    if (r.method != "POST") {
      Response e = openai_error(405, "use POST here");
      e.headers.emplace_back("Allow", "POST");
      return reply(e);
    }
    if (!s.generate_queue) return reply(openai_error(404, "this server has no language model; start it with --gpt or --model"));
    GenerateJob job;
    try {
      job = parse_completion(r.body, s.options, s.tokenizer ? &*s.tokenizer : nullptr, s.model_name);
    } catch (const Error& e) {
      return reply(openai_error(400, e.message()));
    }
    job.reply = reply;
    if (!s.generate_queue->try_push(job)) {
      Response e = openai_error(503, "the generate queue is full (" + std::to_string(s.generate_queue->depth()) +
                                         " requests waiting); retry in a moment");
      e.headers.emplace_back("Retry-After", "1");
      return reply(e);
    }
    s.metrics.set_queue_depth(static_cast<std::int64_t>(s.depth()));
  } else {
    reply(json_error(404, "no route " + r.target + "; the routes are " + kRoutes));
  }
}

}  // namespace troupe::apps::serve
