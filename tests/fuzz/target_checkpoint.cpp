// A checkpoint folder with one of its four files replaced by the input, loaded the way a resumed
// run loads it: load_checkpoint, the settings checked against flags, the weights into a model and
// the state into an AdamW. The replaced file is put back after each input.
#include <CLI/CLI.hpp>

#include <filesystem>

#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/apps/cli.hpp"
#include "troupe/apps/resume.hpp"
#include "troupe/graph/nn.hpp"
#include "troupe/kernels/rng.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/weights.hpp"

namespace troupe::fuzz {

namespace {

const char* const kFiles[] = {"latest", "step-00000002/state.json", "step-00000002/model.safetensors",
                              "step-00000002/optimizer.safetensors"};

// The resume of a small program: a Linear(3, width) trained by AdamW.
std::string resume(const std::string& dir) {
  const models::Checkpoint c = models::load_checkpoint(dir, "troupe-fuzz");
  CLI::App app;
  std::int64_t width = 2;
  std::uint64_t seed = 1;
  std::string data = "corpus.txt";
  app.add_option("--width", width)->check(apps::in_range(1, 64));
  app.add_option("--seed", seed);
  app.add_option("--data", data);
  double lr = 1e-3;
  app.add_option("--lr", lr);
  app.parse(std::vector<std::string>{});
  apps::ResumeSettings settings(app, c.state);
  settings.take("--width", "width", width);
  settings.take("--seed", "seed", seed);
  settings.take("--data", "data", data, /*is_path=*/true);
  (void)c.state.int_at("step");
  Generator gen(seed);
  graph::Linear model(3, width, gen);
  graph::AdamW adam(model.parameters(), kernels::AdamWParams{});
  models::load_weights_into(model, c.model, c.folder + "/model.safetensors", "the checkpoint is damaged");
  std::map<std::string, Tensor> state = c.optimizer;
  settings.settle_lr(state, lr);
  models::load_optimizer_state(adam, state, c.folder + "/optimizer.safetensors");
  return "resumed";
}

}  // namespace

FuzzTarget checkpoint_target(const std::string& scratch) {
  const std::string dir = scratch + "/checkpoint";
  std::filesystem::remove_all(dir);
  Generator gen(1);
  graph::Linear model(3, 2, gen);
  graph::AdamW adam(model.parameters(), kernels::AdamWParams{});
  for (graph::Var& p : model.parameters()) p.set_grad(Tensor::full(p.tensor().shape(), 0.1));
  adam.step();
  models::CheckpointState st;
  st.ints = {{"step", 2}, {"width", 2}, {"seed", 1}};
  st.strings = {{"app", "troupe-fuzz"}, {"data", "corpus.txt"}};
  models::save_checkpoint(dir, 2, model.state_dict(), adam.state_dict(), st);

  FuzzTarget t;
  t.name = "checkpoint";
  std::vector<std::string> originals;
  for (std::size_t k = 0; k < std::size(kFiles); ++k) {
    originals.push_back(read_bytes(dir + "/" + kFiles[k]));
    t.seeds.push_back(std::string(1, static_cast<char>(k)) + originals.back());
  }
  t.dictionary = {"\"ints\"", "\"strings\"", "\"step\"", "\"width\"", "\"seed\"", "\"app\"", "\"data\"",
                  "\"troupe-gpt\"", "step-00000002", "step-00000001", "../", "/", "\"group0.lr\"", "\"weight\"",
                  "\"bias\"", "\"weight.exp_avg\"", "\"bias.step\"", "\"I64\"", "\"F64\"", "\"F32\""};
  t.run = [dir, originals](const std::string& input) {
    if (input.empty()) return std::string("empty input");
    const std::size_t k = static_cast<unsigned char>(input[0]) % std::size(kFiles);
    const std::string path = dir + "/" + kFiles[k];
    write_bytes(path, input.substr(1));
    struct Restore {
      std::string path, bytes;
      ~Restore() { write_bytes(path, bytes); }
    } restore{path, originals[k]};
    return resume(dir);
  };
  return t;
}

}  // namespace troupe::fuzz
