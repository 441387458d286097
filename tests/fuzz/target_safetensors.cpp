// The safetensors reader on arbitrary bytes; every tensor it accepts is read end to end, so a size
// check that let a tensor run past its bytes shows as an out-of-bounds read under ASan.
#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/graph/safetensors.hpp"
#include "troupe/kernels/reduce.hpp"

namespace troupe::fuzz {

FuzzTarget safetensors_target(const std::string& scratch) {
  const std::string path = scratch + "/seed.safetensors";
  graph::save_safetensors(path,
                          {{"w", Tensor::full({2, 3}, 0.5)},
                           {"b", Tensor::full({3}, 1.0, DType::f64)},
                           {"ids", Tensor::from_vector<std::int64_t>({1, 2}, {2})},
                           {"h", Tensor::full({4}, 2.0, DType::bf16)},
                           {"empty", Tensor::zeros({0, 5})}},
                          {{"format", "pt"}});
  FuzzTarget t;
  t.name = "safetensors";
  t.seeds = {read_bytes(path)};
  t.dictionary = {"\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F16\"", "\"BF16\"",
                  "\"F64\"", "\"I64\"", "\"I32\"", "\"U8\"", "\"BOOL\"", "[0,0]", "[4294967296,4294967296]"};
  t.run = [](const std::string& bytes) {
    const graph::SafetensorsFile file = graph::parse_safetensors(bytes, "fuzz.safetensors");
    for (const auto& [name, tensor] : file.tensors)
      if (is_floating(tensor.dtype())) (void)kernels::sum(tensor.to(DType::f64), {});
      else (void)tensor.clone();
    return file.tensors.empty() ? std::string("accepted, no tensors") : std::string("accepted");
  };
  return t;
}

}  // namespace troupe::fuzz
