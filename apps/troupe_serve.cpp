// troupe-serve: an HTTP inference service over the engine: sr-lite upscaling and gpt text
// generation (docs/SERVING.md). SIGTERM or SIGINT stop it after answering what is in flight.
//   troupe-serve --sr runs/sr --gpt runs/gpt [--port 8080] [--token T]
//   troupe-serve --model DIR                      (a GPT-2-family checkpoint, Hugging Face's layout)
#include <csignal>
#include <cstdio>
#include <string>

#include "troupe/apps/cli.hpp"
#include "troupe/apps/serve/http_server.hpp"
#include "troupe/apps/serve/service.hpp"
#include "troupe/apps/run_flags.hpp"
#include "troupe/graph/trace.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/threading.hpp"

using namespace troupe;

namespace {

struct Flags {
  apps::serve::ServerOptions server;
  apps::serve::ServiceOptions service;
  apps::AmpFlags amp;
  double max_body_mb = 16, read_timeout_s = 10;
  int max_wait_ms = 5, kernel_threads = 1;
};

int serve(Flags& f) {
  TROUPE_CHECK(!f.service.sr_path.empty() || !f.service.gpt_path.empty() || !f.service.gpt2_path.empty(), invalid_argument,
               "nothing to serve; give --sr (an sr-lite checkpoint) and/or --gpt (a gpt checkpoint) or --model (a GPT-2 checkpoint)");
  // Every thread started from here on inherits the mask: the signals wait for sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  set_kernel_threads(f.kernel_threads);
  f.service.jit_level = graph::jit_level();
  f.service.amp = apps::resolve_amp(f.amp, f.service.jit_level, "troupe-serve");
  f.service.max_wait = std::chrono::milliseconds(f.max_wait_ms);
  f.server.max_body_bytes = static_cast<std::uint64_t>(f.max_body_mb * (1 << 20));
  f.server.read_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(f.read_timeout_s * 1000));
  apps::serve::Service service(f.service);
  apps::serve::HttpServer server(
      f.server, [&service](const apps::serve::Request& r, apps::serve::Reply reply) { service.handle(r, std::move(reply)); },
      [&service](const apps::serve::Request& r, int status, double s) { service.observe(r, status, s); });
  const char* language = !f.service.gpt2_path.empty() ? "gpt2" : !f.service.gpt_path.empty() ? "gpt" : "";
  std::printf("troupe-serve: listening on http://%s:%u (%s%s%s), JIT_LEVEL=%d, mixed precision %s, queue %zu, "
              "batches of up to %d within %d ms%s\n",
              f.server.host.c_str(), static_cast<unsigned>(server.port()), f.service.sr_path.empty() ? "" : "sr-lite",
              !f.service.sr_path.empty() && *language ? ", " : "", language, f.service.jit_level,
              graph::to_string(f.service.amp.level),
              f.service.queue_capacity, f.service.max_batch, f.max_wait_ms,
              f.server.token.empty() ? "" : ", bearer token required");
  std::fflush(stdout);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::printf("troupe-serve: %s: answering the %d requests in flight, then stopping (send it again to stop at once)\n",
              signal == SIGTERM ? "SIGTERM" : "SIGINT", server.in_flight());
  std::fflush(stdout);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);  // a second signal takes its default action
  server.stop();
  std::printf("troupe-serve: stopped; %llu requests answered with 200\n",
              static_cast<unsigned long long>(service.metrics().requests_with_status(200)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"troupe-serve: HTTP inference with Troupe: POST /v1/upscale (sr-lite) and /v1/generate (gpt)"};
  Flags f;
  auto& s = f.service;
  app.add_option("--host", f.server.host, "address to listen on")->capture_default_str();
  app.add_option("--port", f.server.port, "TCP port (0 = a free one)")->capture_default_str()->check(apps::in_range(0, 65535));
  app.add_option("--token", f.server.token, "require 'Authorization: Bearer <token>' on every request");
  app.add_option("--sr", s.sr_path, "sr-lite to serve: a troupe-sr checkpoint folder or a .safetensors file");
  app.add_option("--sr-channels", s.sr.channels, "sr-lite width, for a .safetensors file")
      ->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--sr-blocks", s.sr.blocks, "sr-lite residual blocks, for a .safetensors file")
      ->capture_default_str()->check(apps::in_range(0, 1024));
  app.add_option("--gpt", s.gpt_path, "gpt to serve: a troupe-gpt checkpoint folder or a .safetensors file");
  app.add_option("--model", s.gpt2_path, "or a GPT-2-family checkpoint folder in Hugging Face's layout (config.json, "
                 "model.safetensors, and its tokenizer's vocab.json and merges.txt)");
  app.add_option("--gpt-d-model", s.gpt.d_model, "gpt width, for a .safetensors file")->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--gpt-layers", s.gpt.layers, "gpt blocks, for a .safetensors file")->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--gpt-heads", s.gpt.heads, "gpt heads, for a .safetensors file")->capture_default_str()->check(apps::in_range(1, 65536));
  app.add_option("--gpt-d-ff", s.gpt.d_ff, "gpt MLP size, for a .safetensors file")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--gpt-seq", s.gpt.seq, "gpt context, for a .safetensors file")->capture_default_str()->check(apps::in_range(1, 1 << 20));
  app.add_option("--max-body-mb", f.max_body_mb, "largest request body (413 above)")->capture_default_str()->check(apps::open_range(0, 4096, "MiB"));
  app.add_option("--max-pixels", s.max_pixels, "largest uploaded image (400 above)")->capture_default_str()->check(apps::in_range(1, 1e9));
  app.add_option("--max-prompt", s.max_prompt_bytes, "longest prompt in bytes (400 above)")->capture_default_str()->check(apps::in_range(0, 1e7));
  app.add_option("--max-tokens", s.max_tokens, "most tokens a generate request may ask")->capture_default_str()->check(apps::in_range(1, 1e6));
  app.add_option("--queue", s.queue_capacity, "requests waiting per model before 503")->capture_default_str()->check(apps::in_range(1, 1e6));
  app.add_option("--max-batch", s.max_batch, "requests run together")->capture_default_str()->check(apps::in_range(1, 1024));
  app.add_option("--max-wait-ms", f.max_wait_ms, "how long a batch waits to fill")->capture_default_str()->check(apps::in_range(0, 60000));
  app.add_option("--read-timeout", f.read_timeout_s, "seconds a client has to send its request")->capture_default_str()->check(apps::open_range(0, 3600, "s"));
  app.add_option("--io-threads", f.server.io_threads, "threads on the sockets")->capture_default_str()->check(apps::in_range(1, 256));
  app.add_option("--threads", f.kernel_threads, "threads per inference call (BLAS, oneDNN)")->capture_default_str()->check(apps::in_range(1, 4096));
  app.add_option("--actor-threads", s.actor_threads,
                 "scheduler threads of the actor programs that run upscale batches and decoding steps, and the "
                 "micro-batches an upscale batch splits into; 0: the workers call the traced models themselves")
      ->capture_default_str()->check(apps::in_range(0, 256));
  apps::add_amp_flags(app, f.amp);
  return apps::run_cli(app, argc, argv, "troupe-serve", [&] { return serve(f); });
}
