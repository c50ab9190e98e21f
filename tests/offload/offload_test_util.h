// Shared helpers of the offload tests: the tiny-flux fixture pipeline, a reference run, exact
// comparison, a scratch directory, and a toy model whose blocks can be called in any order.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"
#include "pipelines/flux_pipeline.h"

namespace offload_test {

using diffq::Tensor;

inline const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";

inline std::unique_ptr<diffq::FluxPipeline> tiny_pipe(bool text_encoders = true) {
  return diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32,
                                              {.load_text_encoders = text_encoders});
}

// 2 steps at 32x32 from the reference embeddings (the transformer runs twice, the VAE once).
inline diffq::FluxCallOptions embeds_call() {
  auto ref = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/generate.safetensors");
  diffq::FluxCallOptions o;
  o.prompt_embeds = ref.tensor("prompt_embeds").clone();
  o.pooled_prompt_embeds = ref.tensor("pooled_prompt_embeds").clone();
  o.height = o.width = 32;
  o.num_inference_steps = 2;
  o.guidance_scale = 3.5;
  return o;
}

// A call that runs every component (text encoders from a prompt).
inline diffq::FluxCallOptions text_call() {
  diffq::FluxCallOptions o;
  o.prompt = {"A photo of a Cat sitting on a RED chair, 4k!!"};
  o.max_sequence_length = 32;
  o.height = o.width = 32;
  o.num_inference_steps = 2;
  return o;
}

inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

inline void expect_same_output(const diffq::FluxOutput& got, const diffq::FluxOutput& ref) {
  EXPECT_TRUE(bit_identical(got.latents, ref.latents)) << "latents differ";
  if (ref.image_u8.defined()) {
    EXPECT_TRUE(bit_identical(got.image_f32, ref.image_f32)) << "image_f32 differs";
    EXPECT_TRUE(bit_identical(got.image_u8, ref.image_u8)) << "image_u8 differs";
  }
}

// A fresh empty directory under the build's temp dir, removed with the object.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("diffq-offload-test-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  size_t count_files() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) n += e.is_regular_file();
    return n;
  }
};

// root: embed (Linear) -> blocks[order[i]] ... -> head (Linear); blocks are a ModuleList of Linear.
class ToyModel : public diffq::Module {
 public:
  explicit ToyModel(int64_t n_blocks, int64_t dim = 16) : Module("ToyModel"), embed(dim, dim), head(dim, dim) {
    register_module("embed", embed);
    for (int64_t i = 0; i < n_blocks; ++i) blocks.push_back(std::make_unique<diffq::Linear>(dim, dim));
    register_module("blocks", blocks);
    register_module("head", head);
    diffq::init_parameters_randn(*this, diffq::DType::f32, 7, 0.3);
  }
  Tensor operator()(const Tensor& x, const std::vector<int>& order) {
    return call([&] {
      Tensor h = embed(x);
      for (int i : order) h = diffq::ops::silu(blocks[size_t(i)](h));
      return head(h);
    });
  }
  diffq::Linear embed;
  diffq::ModuleList<diffq::Linear> blocks;
  diffq::Linear head;
};

}  // namespace offload_test
