// Loading the models as the applications save them (models/saved.hpp): a checkpoint folder brings
// its own shape, a .safetensors file takes the config given; a folder of the
// other application, a file of another shape and a missing path are refused, naming the path.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "expect_error.hpp"
#include "apps/app_runner.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/checkpoint.hpp"
#include "troupe/models/saved.hpp"

using namespace troupe;

namespace {

models::GptConfig small_gpt() {
  models::GptConfig c;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.seq = 8;
  return c;
}

// Whether every parameter of `a` equals `b`'s, bit for bit.
bool same_weights(graph::Module& a, graph::Module& b) {
  const auto x = a.state_dict(), y = b.state_dict();
  if (x.size() != y.size()) return false;
  for (const auto& [name, t] : x) {
    const Tensor& u = y.at(name);
    if (t.shape() != u.shape() || std::memcmp(t.contiguous().raw_data(), u.contiguous().raw_data(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

}  // namespace

TEST(SavedModels, ACheckpointFolderBringsItsOwnShape) {
  const std::string dir = test::fresh_dir("saved_gpt");
  Generator gen(1);
  models::Gpt model(small_gpt(), gen);
  models::CheckpointState state;
  state.strings["app"] = "troupe-gpt";
  for (auto [key, value] : {std::pair{"vocab", model.config.vocab}, {"d_model", model.config.d_model},
                            {"layers", model.config.layers}, {"heads", model.config.heads}, {"d_ff", model.config.d_ff},
                            {"seq", model.config.seq}})
    state.ints[key] = value;
  models::save_checkpoint(dir, 3, model.state_dict(), {}, state);
  const std::unique_ptr<models::Gpt> loaded = models::load_gpt(dir);  // default config: the folder's wins
  EXPECT_EQ(loaded->config.d_model, 16);
  EXPECT_EQ(loaded->config.seq, 8);
  EXPECT_TRUE(same_weights(*loaded, model));
  test::expect_error_mentions([&] { models::load_sr_lite(dir); }, {"not of troupe-sr"});
}

TEST(SavedModels, ASafetensorsFileTakesTheConfigGiven) {
  const std::string dir = test::fresh_dir("saved_files");
  Generator gen(2);
  models::SrConfig sr;
  sr.channels = 8;
  sr.blocks = 1;
  models::SrLite model(sr, gen);
  model.save(dir + "/sr.safetensors");
  EXPECT_TRUE(same_weights(*models::load_sr_lite(dir + "/sr.safetensors", sr), model));
  test::expect_error_mentions([&] { models::load_sr_lite(dir + "/sr.safetensors"); }, {dir + "/sr.safetensors"});  // 64 channels
  test::expect_error_mentions([&] { models::load_gpt(dir + "/none.safetensors", small_gpt()); }, {"does not exist"});
}
