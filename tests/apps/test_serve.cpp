// troupe-serve's routes on loopback, with small models saved by the test: health, the page,
// upscaling (the model's own output, batched when requests arrive together), generation (the
// decoder's own text at temperature 0; concurrent requests decoded together, joining and leaving
// a running batch), bad input (400 naming the problem), a full queue (503 with
// Retry-After, and nothing lost), and SIGTERM with requests in flight (all answered).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/app_runner.hpp"
#include "apps/chromium.hpp"
#include "troupe/apps/image.hpp"
#include "troupe/apps/serve/http_client.hpp"
#include "troupe/apps/serve/service.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/models/gpt_decoder.hpp"

using namespace troupe;
using namespace troupe::apps::serve;
namespace http = boost::beast::http;

namespace {

models::SrConfig small_sr() {
  models::SrConfig c;
  c.channels = 8;
  c.blocks = 1;
  return c;
}

models::GptConfig small_gpt() {
  models::GptConfig c;
  c.d_model = 32;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 64;
  c.seq = 16;
  return c;
}

// Weights of freshly initialised models, saved once for every test.
struct Models {
  Models() {
    const std::string dir = test::fresh_dir("serve_models");
    Generator gen(3);
    models::SrLite(small_sr(), gen).save(sr = dir + "/sr.safetensors");
    models::Gpt(small_gpt(), gen).save(gpt = dir + "/gpt.safetensors");
  }
  std::string sr, gpt;
};
const Models& saved() {
  static const Models m;
  return m;
}

ServiceOptions options() {
  ServiceOptions o;
  o.sr_path = saved().sr;
  o.sr = small_sr();
  o.gpt_path = saved().gpt;
  o.gpt = small_gpt();
  o.max_pixels = 64 * 64;
  o.max_prompt_bytes = 32;
  o.max_tokens = 40;
  return o;
}

// A service behind a server on a free loopback port.
struct Running {
  explicit Running(const ServiceOptions& o)
      : service(o),
        server(ServerOptions{"127.0.0.1", 0, 1u << 20, std::chrono::milliseconds(5000), 2, "", "troupe-serve"},
               [this](const Request& r, Reply reply) { service.handle(r, std::move(reply)); },
               [this](const Request& r, int status, double s) { service.observe(r, status, s); }) {}
  Service service;
  HttpServer server;
};

std::string png_of(std::int64_t h, std::int64_t w, std::uint64_t seed) { return apps::encode_png(apps::procedural_image(seed, h, w)); }

// GET /metrics once `sample` appears in it: a request is counted just after its answer is written,
// so a client that has its answer may ask before the count moved (up to 2 s).
std::string metrics_with(std::uint16_t port, const std::string& sample) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text = HttpClient(port).send(http::verb::get, "/metrics").body();
    if (text.find(sample) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return text;
}

}  // namespace

TEST(Serve, HealthAndThePage) {
  Running s(options());
  HttpClient c(s.server.port());
  const auto health = c.send(http::verb::get, "/healthz");
  EXPECT_EQ(health.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(health.body()).at("models"), nlohmann::json::array({"sr-lite", "gpt"}));
  const auto page = c.send(http::verb::get, "/");
  EXPECT_EQ(page.result_int(), 200);
  EXPECT_NE(page.body().find("id=\"upscale-form\""), std::string::npos);
  EXPECT_NE(page.body().find("id=\"generate-form\""), std::string::npos);
  EXPECT_EQ(c.send(http::verb::post, "/healthz").result_int(), 405);
  const auto missing = c.send(http::verb::get, "/v2/nothing");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_NE(missing.body().find("the routes are"), std::string::npos);
}

// With actor threads the batches run as an actor program; without, the worker calls the traced
// model itself: the same images either way.
TEST(Serve, UpscalesAsTheModelDoesAndBatchesConcurrentRequests) {
  for (int actor_threads : {2, 0}) {
    SCOPED_TRACE("--actor-threads " + std::to_string(actor_threads));
    ServiceOptions o = options();
    o.max_wait = std::chrono::milliseconds(300);  // requests arriving together run together
    o.actor_threads = actor_threads;
    Running s(o);
    const std::string png = png_of(12, 20, 1);
    // The model itself, eagerly, on the same image.
    Generator gen(0);
    models::SrLite model(small_sr(), gen);
    model.load(saved().sr);
    graph::NoGradGuard no_grad;
    const Tensor image = apps::decode_png(png, "test");
    const Tensor expected = model(graph::Var(image.unsqueeze(0))).tensor().reshape({3, 24, 40});
    std::vector<std::future<http::response<http::string_body>>> answers;
    for (int i = 0; i < 4; ++i)
      answers.push_back(std::async(std::launch::async, [&] { return HttpClient(s.server.port()).send(http::verb::post, "/v1/upscale", png); }));
    for (auto& a : answers) {
      const auto r = a.get();
      ASSERT_EQ(r.result_int(), 200) << r.body();
      EXPECT_EQ(std::string(r[http::field::content_type]), "image/png");
      const Tensor out = apps::decode_png(r.body(), "answer");
      ASSERT_EQ(out.shape(), (Shape{3, 24, 40}));
      const auto got = out.to_vector<float>(), want = apps::decode_png(apps::encode_png(expected), "expected").to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1.0 / 255 + 1e-6) << i;
    }
    const std::string count = "troupe_requests_total{route=\"/v1/upscale\",status=\"200\"} 4";
    const std::string metrics = metrics_with(s.server.port(), count);
    EXPECT_NE(metrics.find(count), std::string::npos) << metrics;
    EXPECT_EQ(metrics.find("troupe_batch_size_count{route=\"/v1/upscale\"} 4"), std::string::npos)
        << "four concurrent requests ran one by one\n" << metrics;
  }
}

namespace {

// What troupe-serve should answer for `prompt` at temperature 0: the decoder's greedy text, alone,
// as the JSON string the answer holds.
std::string greedy_text(const std::string& prompt, int tokens) {
  Generator gen(0);
  models::Gpt model(small_gpt(), gen);
  model.load(saved().gpt);
  graph::NoGradGuard no_grad;
  models::GptDecoder decoder(model, {}, true);
  std::vector<std::int64_t> context;
  for (unsigned char c : prompt) context.push_back(c);
  std::string text;
  std::uint64_t rng = 1;
  for (int k = 0; k < tokens; ++k) {
    context.push_back(models::sample_token(decoder.next(context), 0, 0, rng));
    text.push_back(static_cast<char>(context.back()));
  }
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string text_of(const http::response<http::string_body>& r) {
  return nlohmann::json::parse(r.body()).at("text").dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The value of the Prometheus sample named `sample` (with its labels) in `text`.
double sample_value(const std::string& text, const std::string& sample) {
  const std::size_t at = text.find(sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 1));
}

}  // namespace

// Decoding steps run as an actor program, or (no actor threads) called by the worker itself.
TEST(Serve, GeneratesTheDecodersTextAtTemperatureZero) {
  for (int actor_threads : {2, 0}) {
    ServiceOptions o = options();
    o.actor_threads = actor_threads;
    Running s(o);
    const auto r = HttpClient(s.server.port())
                       .send(http::verb::post, "/v1/generate", R"({"prompt": "The actor", "max_tokens": 30, "temperature": 0})");
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(nlohmann::json::parse(r.body()).at("tokens"), 30);
    EXPECT_EQ(text_of(r), greedy_text("The actor", 30)) << "--actor-threads " << actor_threads;
  }
}

// A GPT-2 checkpoint (--model: tests/data/gpt2_tiny, Hugging Face's layout with its tokenizer):
// prompts are BPE-encoded, "tokens" counts BPE tokens, the text is their bytes, and concurrent
// requests decode together into each one's own greedy text, as actor programs and as direct calls.
TEST(Serve, GeneratesFromAGpt2Checkpoint) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tiny";
  const auto model = models::load_gpt2(dir);
  const models::Gpt2Tokenizer tokenizer = models::Gpt2Tokenizer::load(dir);
  const auto greedy = [&](const std::string& prompt, int tokens, std::string& finish) {
    graph::NoGradGuard no_grad;
    models::GptDecoder decoder(*model, {}, true);
    std::vector<std::int64_t> context = tokenizer.encode(prompt);
    std::string text;
    std::uint64_t rng = 1;
    finish = "length";
    for (int k = 0; k < tokens; ++k) {
      const std::int64_t next = models::sample_token(decoder.next(context), 0, 0, rng);
      if (next == *tokenizer.end_of_text()) {
        finish = "stop";
        break;
      }
      context.push_back(next);
      text += tokenizer.token_bytes(next);
    }
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  for (int actor_threads : {2, 0}) {
    ServiceOptions o;
    o.gpt2_path = dir;
    o.max_tokens = 12;
    o.actor_threads = actor_threads;
    Running s(o);
    const auto health = HttpClient(s.server.port()).send(http::verb::get, "/healthz", "");
    EXPECT_NE(health.body().find("\"gpt2\""), std::string::npos) << health.body();
    std::vector<std::future<http::response<http::string_body>>> answers;
    const std::vector<std::string> prompts{"Hello, world", "naïve café", "it's 2026", "中文"};
    for (const std::string& p : prompts)
      answers.push_back(std::async(std::launch::async, [&, p] {
        return HttpClient(s.server.port())
            .send(http::verb::post, "/v1/generate", nlohmann::json{{"prompt", p}, {"max_tokens", 10}, {"temperature", 0}}.dump());
      }));
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const auto r = answers[i].get();
      ASSERT_EQ(r.result_int(), 200) << r.body();
      std::string finish;
      EXPECT_EQ(text_of(r), greedy(prompts[i], 10, finish)) << prompts[i] << ", --actor-threads " << actor_threads;
      const nlohmann::json answer = nlohmann::json::parse(r.body());
      EXPECT_EQ(answer.at("finish"), finish);
      if (finish == "length") {
        EXPECT_EQ(answer.at("tokens"), 10);
      }
    }
    const auto bad = HttpClient(s.server.port()).send(http::verb::post, "/v1/generate", R"({"prompt": "x", "top_k": -1})");
    EXPECT_EQ(bad.result_int(), 400);
  }
  ServiceOptions both;
  both.gpt2_path = dir;
  both.gpt_path = saved().gpt;
  EXPECT_THROW(Service{both}, Error);
}

// OpenAI's completions API over a GPT-2 checkpoint: GET /v1/models names it; POST
// /v1/completions answers a completion object (the greedy text, echo, usage, top-1 logprobs,
// stop sequences, also one that spans two tokens), and errors come in OpenAI's shape.
TEST(Serve, AnswersOpenAiCompletions) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tiny";
  const models::Gpt2Tokenizer tokenizer = models::Gpt2Tokenizer::load(dir);
  ServiceOptions o;
  o.gpt2_path = dir;
  o.max_tokens = 16;
  Running s(o);
  HttpClient client(s.server.port());
  const nlohmann::json listed = nlohmann::json::parse(client.send(http::verb::get, "/v1/models", "").body());
  ASSERT_EQ(listed.at("data").size(), 1u);
  EXPECT_EQ(listed["data"][0]["id"], "gpt2_tiny");
  const auto complete = [&](nlohmann::json body) {
    body["prompt"] = "Hello, world";
    body["temperature"] = 0;
    const auto r = client.send(http::verb::post, "/v1/completions", body.dump());
    EXPECT_EQ(r.result_int(), 200) << r.body();
    return nlohmann::json::parse(r.body());
  };
  const nlohmann::json full = complete({{"model", "gpt2_tiny"}, {"max_tokens", 10}, {"logprobs", 1}, {"echo", true}});
  EXPECT_EQ(full.at("object"), "text_completion");
  EXPECT_EQ(full.at("model"), "gpt2_tiny");
  const nlohmann::json& choice = full.at("choices").at(0);
  EXPECT_EQ(choice.at("finish_reason"), "length");
  const std::string text = choice.at("text");
  ASSERT_EQ(text.rfind("Hello, world", 0), 0u) << "echo puts the prompt first";
  const auto prompt_tokens = static_cast<std::int64_t>(tokenizer.encode("Hello, world").size());
  EXPECT_EQ(full["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(full["usage"]["completion_tokens"], 10);
  EXPECT_EQ(full["usage"]["total_tokens"], prompt_tokens + 10);
  const nlohmann::json& lp = choice.at("logprobs");
  ASSERT_EQ(lp.at("tokens").size(), 10u);
  EXPECT_EQ(lp["text_offset"][0], 12) << "offsets count the echoed prompt";
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_LT(lp["token_logprobs"][i].get<double>(), 0.0);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(lp["top_logprobs"][i].begin().value().get<double>(), lp["token_logprobs"][i].get<double>());
  }
  // Without echo the same continuation; a stop sequence ends it before the stop, also when the
  // stop begins in one token and ends in the next.
  const std::string continuation = complete({{"max_tokens", 10}}).at("choices").at(0).at("text");
  EXPECT_EQ("Hello, world" + continuation, text);
  ASSERT_GE(continuation.size(), 8u);
  const std::string second_token = lp["tokens"][1];
  for (const std::string& stop :
       std::vector<std::string>{second_token, continuation.substr(lp["tokens"][0].get<std::string>().size() - 1, 3)}) {
    const nlohmann::json stopped = complete({{"max_tokens", 10}, {"stop", {"zzz-never", stop}}});
    EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop") << stop;
    EXPECT_EQ(stopped["choices"][0]["text"], continuation.substr(0, continuation.find(stop))) << stop;
  }
  // Errors in OpenAI's shape.
  for (const auto& [body, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "x", "stream": true, "logprobs": 1})", "not streamed"},
           {R"({"prompt": "x", "model": "gpt-4"})", "'model' must be \"gpt2_tiny\""},
           {R"({"prompt": "x", "n": 2})", "'n' must be 1"},
           {R"({"prompt": "x", "logprobs": 5})", "'logprobs' must be 0 or 1"},
           {R"({"prompt": "x", "top_p": 0})", "'top_p'"},
           {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "at most 4"},
           {R"({"prompt": "x", "best_of": 2})", "unknown field 'best_of'"},
           {R"({"prompt": ["a", "b"]})", "one string"}}) {
    const auto r = client.send(http::verb::post, "/v1/completions", body);
    EXPECT_EQ(r.result_int(), 400) << body;
    const nlohmann::json e = nlohmann::json::parse(r.body());
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << r.body();
    EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos) << r.body();
  }
  EXPECT_EQ(client.send(http::verb::get, "/v1/completions", "").result_int(), 405);
  // Latencies of the four completions that decoded: 10, 10, 2 and 2 tokens.
  const std::string metrics = client.send(http::verb::get, "/metrics", "").body();
  EXPECT_EQ(sample_value(metrics, "troupe_time_to_first_token_seconds_count"), 4) << metrics;
  EXPECT_EQ(sample_value(metrics, "troupe_inter_token_latency_seconds_count"), 9 + 9 + 1 + 1) << metrics;
  EXPECT_EQ(sample_value(metrics, "troupe_time_per_output_token_seconds_count"), 4) << metrics;
  EXPECT_NE(metrics.find("troupe_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4"), std::string::npos) << metrics;
}

// The events of a streamed answer's body: the JSON of each "data: " line but "[DONE]", which must
// come last.
std::vector<nlohmann::json> events_of(const std::string& body) {
  std::vector<nlohmann::json> out;
  std::size_t at = 0;
  bool done = false;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const std::size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line";
    const std::string data = body.substr(at + 6, end - at - 6);
    EXPECT_FALSE(done) << "an event after [DONE]";
    if (data == "[DONE]") done = true;
    else out.push_back(nlohmann::json::parse(data));
    at = end;
  }
  EXPECT_TRUE(done) << "no data: [DONE]";
  return out;
}

// "stream": true answers Server-Sent Events whose texts add up to the whole completion, a stop
// sequence held back until it is known, characters never split, the last event with the finish
// reason and the usage; a client that goes away mid-stream frees its row at the next step.
TEST(Serve, StreamsCompletionsAndCancelsWhenTheClientGoes) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/gpt2_tiny";
  ServiceOptions o;
  o.gpt2_path = dir;
  o.max_tokens = 1 << 20;
  Running s(o);
  for (const nlohmann::json& extra : {nlohmann::json::object(), nlohmann::json{{"stop", "9dou"}}, nlohmann::json{{"echo", true}}}) {
    HttpClient client(s.server.port());  // a stream closes its connection when it ends
    nlohmann::json body{{"prompt", "Hello, world"}, {"max_tokens", 10}, {"temperature", 0}};
    body.update(extra);
    const std::string whole = nlohmann::json::parse(client.send(http::verb::post, "/v1/completions", body.dump()).body())
                                  .at("choices").at(0).at("text");
    body["stream"] = true;
    const auto r = client.send(http::verb::post, "/v1/completions", body.dump());
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(r[http::field::content_type], "text/event-stream");
    const std::vector<nlohmann::json> events = events_of(r.body());
    ASSERT_GE(events.size(), 2u) << r.body();
    std::string text;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const nlohmann::json& choice = events[i].at("choices").at(0);
      text += choice.at("text").get<std::string>();
      EXPECT_EQ(choice.at("finish_reason").is_null(), i + 1 < events.size()) << "event " << i;
      EXPECT_EQ(events[i].at("id"), events[0].at("id"));
    }
    EXPECT_EQ(text, whole) << extra.dump();
    EXPECT_TRUE(events.back().contains("usage"));
  }
  // A client that reads the first events of a long stream and hangs up.
  {
    HttpClient gone(s.server.port());
    const std::string body = R"({"prompt": "Hello", "max_tokens": 100000, "temperature": 0.8, "stream": true})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    boost::asio::write(gone.socket, boost::asio::buffer(request));
    std::string seen;
    char chunk[1024];
    while (seen.find("data: ") == std::string::npos) seen.append(chunk, gone.socket.read_some(boost::asio::buffer(chunk)));
    gone.socket.close();
  }
  const std::string cancelled = metrics_with(s.server.port(), "troupe_requests_cancelled_total 1");
  EXPECT_EQ(sample_value(cancelled, "\ntroupe_requests_cancelled_total"), 1) << cancelled;
  const std::string idle = metrics_with(s.server.port(), "troupe_requests_running 0");
  EXPECT_EQ(sample_value(idle, "\ntroupe_requests_running"), 0) << idle;
}

// A client that posts a long completion without streaming and hangs up before the answer: the
// server notices the closed connection while the request decodes, and the row leaves at the next
// step, its slot free; the connection's next requests (another client's) are served as usual.
TEST(Serve, ANonStreamedRequestWhoseClientGoesIsGivenUp) {
  ServiceOptions o = options();
  o.max_tokens = 1 << 20;
  Running s(o);
  {
    HttpClient gone(s.server.port());
    const std::string body = R"({"prompt": "Hello", "max_tokens": 100000, "temperature": 0.8})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    boost::asio::write(gone.socket, boost::asio::buffer(request));
    const std::string running = metrics_with(s.server.port(), "troupe_requests_running 1");
    ASSERT_EQ(sample_value(running, "\ntroupe_requests_running"), 1) << running;
    gone.socket.close();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cancelled = metrics_with(s.server.port(), "troupe_requests_cancelled_total 1");
  EXPECT_EQ(sample_value(cancelled, "\ntroupe_requests_cancelled_total"), 1) << cancelled;
  const std::string idle = metrics_with(s.server.port(), "troupe_requests_running 0");
  EXPECT_EQ(sample_value(idle, "\ntroupe_requests_running"), 0) << idle;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  HttpClient next(s.server.port());
  const auto r = next.send(http::verb::post, "/v1/completions", R"({"prompt": "Hi", "max_tokens": 3})");
  EXPECT_EQ(r.result_int(), 200) << r.body();
}

// Requests that arrive together start one batch; those that come while it decodes join it between
// steps; rows leave as they finish, or go on beside the batch once past the 16 positions. Whatever
// joined when, each text is the one decoded alone.
TEST(Serve, ConcurrentGenerationsAreDecodedTogether) {
  ServiceOptions o = options();
  o.max_wait = std::chrono::milliseconds(300);
  Running s(o);
  std::vector<std::future<http::response<http::string_body>>> answers;
  const auto prompt = [](int i) { return std::string(static_cast<std::size_t>(1 + 3 * (i % 4)), static_cast<char>('a' + i)); };
  const auto tokens = [](int i) { return 5 + 5 * i; };  // from the fourth on, they outgrow the 16 positions
  for (int i = 0; i < 8; ++i) {
    if (i >= 4) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // these come while the first decode
    answers.push_back(std::async(std::launch::async, [&, i] {
      const std::string body = R"({"prompt": ")" + prompt(i) + R"(", "max_tokens": )" + std::to_string(tokens(i)) +
                               R"(, "temperature": 0})";
      return HttpClient(s.server.port()).send(http::verb::post, "/v1/generate", body);
    }));
  }
  for (int i = 0; i < 8; ++i) {
    const auto r = answers[static_cast<std::size_t>(i)].get();
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(nlohmann::json::parse(r.body()).at("tokens"), tokens(i));
    EXPECT_EQ(text_of(r), greedy_text(prompt(i), tokens(i))) << "request " << i;
  }
  const std::string metrics = metrics_with(s.server.port(), "troupe_requests_total{route=\"/v1/generate\",status=\"200\"} 8");
  EXPECT_EQ(sample_value(metrics, "troupe_requests_total{route=\"/v1/generate\",status=\"200\"}"), 8) << metrics;
  // One observation per decoding step: some of them advanced several rows.
  EXPECT_LT(sample_value(metrics, "troupe_batch_size_bucket{route=\"/v1/generate\",le=\"1\"}"),
            sample_value(metrics, "troupe_batch_size_count{route=\"/v1/generate\"}"))
      << "the concurrent generations never decoded together\n" << metrics;
}

TEST(Serve, BadInputGetsA400NamingTheProblem) {
  Running s(options());
  HttpClient c(s.server.port());
  const auto expect_400 = [&](const std::string& target, const std::string& body, const std::string& says) {
    const auto r = c.send(http::verb::post, target, body);
    EXPECT_EQ(r.result_int(), 400) << target << " " << body;
    EXPECT_NO_THROW(nlohmann::json::parse(r.body())) << r.body();
    EXPECT_NE(r.body().find(says), std::string::npos) << r.body();
  };
  expect_400("/v1/upscale", "GIF89a....", "not a PNG");
  expect_400("/v1/upscale", png_of(12, 20, 2).substr(0, 60), "cannot decode the request body");
  expect_400("/v1/upscale", png_of(80, 80, 3), "more than the limit of 4096");
  expect_400("/v1/generate", "{\"prompt\": \"x\"", "not JSON");
  expect_400("/v1/generate", "[1, 2]", "JSON object");
  expect_400("/v1/generate", R"({"prompt": 5})", "'prompt' must be a string");
  expect_400("/v1/generate", R"({"prompt": "x", "tokens": 3})", "unknown field 'tokens'");
  expect_400("/v1/generate", R"({"prompt": "x", "max_tokens": 0})", "'max_tokens' must be an integer from 1 to 40");
  expect_400("/v1/generate", R"({"prompt": "x", "temperature": -1})", "'temperature' must be a number");
  expect_400("/v1/generate", R"({"prompt": ")" + std::string(40, 'a') + "\"}", "more than the limit of 32");
  expect_400("/v1/generate", "{\"prompt\": \"\xff\xfe\"}", "not JSON");  // invalid UTF-8, answered as valid JSON
  // A server without the model says which flag loads it.
  ServiceOptions only_gpt = options();
  only_gpt.sr_path.clear();
  Running g(only_gpt);
  const auto r = HttpClient(g.server.port()).send(http::verb::post, "/v1/upscale", png_of(12, 20, 4));
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_NE(r.body().find("start it with --sr"), std::string::npos);
}

TEST(Serve, AFullQueueAnswers503AndLosesNothing) {
  ServiceOptions o = options();
  o.max_pixels = 1 << 20;
  o.queue_capacity = 1;
  o.max_batch = 1;
  o.max_wait = std::chrono::milliseconds(0);
  Running s(o);
  const std::string big = png_of(512, 512, 5);  // each takes the worker tens of milliseconds
  constexpr int kRequests = 8;
  std::atomic<int> connected{0};
  std::vector<std::future<http::response<http::string_body>>> answers;
  for (int i = 0; i < kRequests; ++i)
    answers.push_back(std::async(std::launch::async, [&] {
      HttpClient c(s.server.port());
      ++connected;
      while (connected < kRequests) std::this_thread::yield();  // then all send at once
      return c.send(http::verb::post, "/v1/upscale", big);
    }));
  int ok = 0, busy = 0;
  for (auto& a : answers) {
    const auto r = a.get();
    if (r.result_int() == 200) {
      ++ok;
      EXPECT_EQ(apps::decode_png(r.body(), "answer").shape(), (Shape{3, 1024, 1024}));
    } else {
      ASSERT_EQ(r.result_int(), 503) << r.body();
      EXPECT_EQ(std::string(r[http::field::retry_after]), "1");
      EXPECT_NE(r.body().find("queue is full"), std::string::npos);
      ++busy;
    }
  }
  EXPECT_EQ(ok + busy, kRequests);
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1) << "eight requests at once never filled a queue of one";
}

// troupe-serve as a process on a free port, with the test's models.
struct ServeProcess {
  explicit ServeProcess(std::vector<std::string> extra) {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> args{TROUPE_SERVE_BIN, "--port", "0", "--sr", saved().sr, "--sr-channels", "8", "--sr-blocks",
                                  "1", "--gpt", saved().gpt, "--gpt-d-model", "32", "--gpt-heads", "2", "--gpt-layers",
                                  "1", "--gpt-d-ff", "64", "--gpt-seq", "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    output = fdopen(out[0], "r");
    char line[512] = {};
    if (fgets(line, sizeof line, output)) first_line = line;
    const auto at = first_line.find("127.0.0.1:");
    EXPECT_NE(at, std::string::npos) << first_line;
    if (at != std::string::npos) port = static_cast<std::uint16_t>(std::stoi(first_line.substr(at + 10)));
  }
  /// Sends SIGTERM and returns finish().
  std::pair<int, std::string> stop() {
    kill(pid, SIGTERM);
    return finish();
  }
  /// Waits for the exit; returns its status and what it printed after the first line.
  std::pair<int, std::string> finish() {
    int status = 0;
    waitpid(pid, &status, 0);
    std::string rest;
    char line[512];
    while (fgets(line, sizeof line, output)) rest += line;
    fclose(output);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, rest};
  }
  pid_t pid = 0;
  FILE* output = nullptr;
  std::string first_line;
  std::uint16_t port = 0;
};

// SIGTERM while requests are in flight answers all of them, and the process exits 0.
TEST(Serve, SigtermAnswersTheRequestsInFlight) {
  ServeProcess serve({"--max-tokens", "4000"});
  const std::uint16_t port = serve.port;
  using Clock = std::chrono::steady_clock;
  std::vector<std::future<std::pair<http::response<http::string_body>, Clock::time_point>>> answers;
  for (int i = 0; i < 3; ++i)
    answers.push_back(std::async(std::launch::async, [port] {
      auto r = HttpClient(port).send(http::verb::post, "/v1/generate", R"({"prompt": "x", "max_tokens": 4000})");
      return std::make_pair(r, Clock::now());
    }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the requests are read and queued
  const Clock::time_point signalled = Clock::now();
  kill(serve.pid, SIGTERM);
  int after = 0;
  for (auto& a : answers) {
    const auto [r, done] = a.get();
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(nlohmann::json::parse(r.body()).at("tokens"), 4000);
    after += done > signalled;
  }
  EXPECT_GE(after, 1) << "every request was answered before the signal: nothing was in flight";
  const auto [status, rest] = serve.finish();
  EXPECT_EQ(status, 0);
  EXPECT_NE(rest.find("SIGTERM: answering the"), std::string::npos) << rest;
  EXPECT_NE(rest.find("stopped; 3 requests answered with 200"), std::string::npos) << rest;
}

// The page in headless Chromium: loaded with #selftest it submits both forms (a drawn 20x12 PNG,
// a 24-token prompt) and shows the 40x24 result and the continuation; a screenshot is taken.
TEST(Serve, ThePageWorksInHeadlessChromium) {
  const std::string common = test::headless_chromium();
  if (common.empty()) GTEST_SKIP() << test::kNoChromium;
  ServeProcess serve({});
  const std::string url = "http://127.0.0.1:" + std::to_string(serve.port) + "/#selftest";
  const auto dom = test::run_app(common + "--dump-dom '" + url + "'");
  EXPECT_NE(dom.output.find("<title>troupe-serve: selftest done</title>"), std::string::npos) << dom.output;
  EXPECT_NE(dom.output.find("upscaled to 40x24"), std::string::npos) << dom.output;
  EXPECT_NE(dom.output.find("data-tokens=\"24\""), std::string::npos) << dom.output;
  const std::string shot = test::fresh_dir("serve_browser") + "/page.png";
  test::run_app(common + "--window-size=900,1000 --screenshot=" + shot + " '" + url + "'");
  EXPECT_EQ(apps::read_png(shot).shape(), (Shape{3, 1000, 900}));
  const auto [status, rest] = serve.stop();
  EXPECT_EQ(status, 0) << rest;
}
