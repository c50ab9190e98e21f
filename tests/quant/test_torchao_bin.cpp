// torchao-quantized PyTorch .bin (Diffusers' save_pretrained(safe_serialization=False) of a
// TorchAoConfig(Int8WeightOnlyConfig()) transformer, seed 003) against the libraries that wrote it
// (tests/fixtures/torch-bin/flux-int8wo, tools/reference/make_torch_bin.py): the subclasses come out
// with the metadata torchao's own safetensors support writes, their dequantized weights equal torchao's
// dequantize() bit for bit, and the tiny FLUX pipeline with that transformer folder gives Diffusers'
// latents (Diffusers loading the same .bin) within 1e-4.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/diffusers_folder.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "pipelines/flux_pipeline.h"
#include "quant/quant_method.h"
#include "common/flux_latent_call.h"

namespace {

namespace fs = std::filesystem;
using namespace diffq;
using nlohmann::json;

const fs::path kFix = fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures";
const fs::path kDir = kFix / "torch-bin";

const json& expected() {
  static const json j = [] {
    std::ifstream in(kDir / "flux_int8wo.json");
    return json::parse(in);
  }();
  return j;
}

const io::SafetensorsFile& reference() {
  static const auto f = io::SafetensorsFile::open(kDir / "flux_int8wo.safetensors");
  return f;
}

TEST(TorchaoBin, SubclassesFlattenToTorchaosSafetensorsLayout) {
  const io::TorchCheckpoint c = io::load_torch_checkpoint(kDir / "flux-int8wo/transformer/diffusion_pytorch_model.bin");
  for (const auto& [key, want] : expected()["torchao_metadata"].items()) {
    ASSERT_TRUE(c.metadata.count(key)) << key;
    json got = json::parse(c.metadata.at(key));
    json w = want;
    // _tensor_data_names: torchao lists optional names first; the set is what matters.
    const auto names = [](const json& a) { return std::set<std::string>(a.begin(), a.end()); };
    EXPECT_EQ(names(got["_tensor_data_names"]), names(w["_tensor_data_names"])) << key;
    got.erase("_tensor_data_names");
    w.erase("_tensor_data_names");
    EXPECT_EQ(got, w) << key;
    const std::string m = key.substr(0, key.size() - 7);  // "<module>.weight" -> module
    EXPECT_TRUE(c.tensors.count(m + "._weight_qdata") && c.tensors.count(m + "._weight_scale")) << key;
    EXPECT_FALSE(c.tensors.count(key));
  }
}

TEST(TorchaoBin, DequantizedWeightsBitExact) {
  const fs::path dir = kDir / "flux-int8wo" / "transformer";
  const io::WeightFiles files = io::find_weight_files(dir);
  const io::StateDict sd = io::load_weight_files(files);
  const io::Metadata md = io::load_weight_metadata(files);
  std::ifstream cin(dir / "config.json");
  const json cfg = json::parse(cin);
  const auto method = quant::quant_method_from_config(cfg["quantization_config"], "config.json");
  for (const auto& [module, cls] : expected()["dequantized"].items()) {
    const Tensor want = reference().tensor(module + ".dequantized");
    std::vector<std::string> consumed;
    const auto w = method->load(sd, module, want.shape(), &md, consumed);
    ASSERT_TRUE(w) << module;
    EXPECT_EQ(w->scheme(), "torchao_int8wo") << module << " (" << cls << ")";
    const auto got = w->dequantize(DType::f32).to_f32_vector();
    const auto ref = want.to_f32_vector();
    ASSERT_EQ(got.size(), ref.size());
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &ref[i], 4) != 0;
    EXPECT_EQ(diff, 0u) << module << ": " << diff << " of " << got.size() << " values differ";
  }
}

// The tiny pipeline folder `root` (emptied first) with its transformer replaced by `transformer`
// (symlinks, nothing copied).
fs::path pipeline_with_transformer(const fs::path& root, const fs::path& transformer) {
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root);
  for (const auto& e : fs::directory_iterator(kFix / "tiny-flux")) {
    const std::string n = e.path().filename().string();
    if (n == "transformer" || n == "reference") continue;
    if (e.is_directory())
      fs::create_directory_symlink(e.path(), root / n);
    else
      fs::copy_file(e.path(), root / n);
  }
  fs::create_directory_symlink(transformer, root / "transformer");
  return root;
}

// The tiny pipeline folder with its transformer replaced by the .bin one (symlinks, nothing copied).
// Removes a test's pipeline folder when the test ends (declared before the pipeline, so after it is gone).
struct RemovedAtExit {
  fs::path root;
  ~RemovedAtExit() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

fs::path pipeline_with_bin_transformer() {
  // Per process: ctest runs this test's @AVX2 / @SCALAR copies at the same time.
  return pipeline_with_transformer(fs::temp_directory_path() / ("diffq_torchao_bin_pipeline-" + std::to_string(::getpid())),
                                   kDir / "flux-int8wo" / "transformer");
}

TEST(TorchaoBin, PipelineMatchesDiffusersLoadingTheBinFolder) {
  const json& call = expected()["call"];
  const fs::path root = pipeline_with_bin_transformer();
  const RemovedAtExit cleanup{root};
  auto pipe = FluxPipeline::from_pretrained(root, DType::f32);
  EXPECT_EQ(pipe->quantization.at("transformer"), "torchao Int8WeightOnlyConfig (pre-quantized)");
  auto o = diffq::testing::flux_latent_call(call);
  const Tensor got = (*pipe)(o).latents;
  const Tensor want = reference().tensor("latents");
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.to_f32_vector(), w = want.to_f32_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num = std::max(num, std::abs(double(g[i]) - double(w[i])));
    den = std::max(den, std::abs(double(w[i])));
  }
  std::printf("[ latents  ] max rel err %.3g vs Diffusers loading the .bin\n", num / den);
  EXPECT_LE(num / den, 1e-4) << "max |d| " << num << ", max |ref| " << den;
  std::error_code ec;
  fs::remove_all(root, ec);
}

// Int8DynamicActivationInt8WeightConfig and Float8WeightOnlyConfig, saved as .bin the same way (a smaller
// random transformer that fits the tiny pipeline: flux-<tag>/, flux_<tag>.{json,safetensors}): the
// metadata diffq builds from the pickle equals torchao's flatten_tensor_state_dict, the dequantized weights
// equal torchao's bit for bit, and the pipeline is within the scheme's bound of Diffusers' (int8dq 5e-3 as
// tests/pipelines/test_flux_quantized.cpp: Diffusers+torchao round the int8 activations differently;
// fp8wo 1e-6 there, 1e-4 here as the fp32 bound).
struct BinCase {
  const char* tag;
  const char* scheme;
  const char* label;
  double bound;
};

class TorchaoBinConfigs : public ::testing::TestWithParam<BinCase> {
 protected:
  json expected_json() const {
    std::ifstream in(kDir / (std::string("flux_") + GetParam().tag + ".json"));
    return json::parse(in);
  }
  io::SafetensorsFile reference_file() const {
    return io::SafetensorsFile::open(kDir / (std::string("flux_") + GetParam().tag + ".safetensors"));
  }
  fs::path folder() const { return kDir / (std::string("flux-") + GetParam().tag) / "transformer"; }
};

TEST_P(TorchaoBinConfigs, MetadataEqualsTorchaosFlatten) {
  const io::TorchCheckpoint c = io::load_torch_checkpoint(folder() / "diffusion_pytorch_model.bin");
  const json e = expected_json();
  ASSERT_FALSE(e["torchao_metadata"].empty());
  for (const auto& [key, want] : e["torchao_metadata"].items()) {
    ASSERT_TRUE(c.metadata.count(key)) << key;
    json got = json::parse(c.metadata.at(key));
    json w = want;
    const auto names = [](const json& a) { return std::set<std::string>(a.begin(), a.end()); };
    EXPECT_EQ(names(got["_tensor_data_names"]), names(w["_tensor_data_names"])) << key;
    got.erase("_tensor_data_names");
    w.erase("_tensor_data_names");
    EXPECT_EQ(got, w) << key;
  }
}

TEST_P(TorchaoBinConfigs, DequantizedWeightsBitExact) {
  const io::WeightFiles files = io::find_weight_files(folder());
  const io::StateDict sd = io::load_weight_files(files);
  const io::Metadata md = io::load_weight_metadata(files);
  std::ifstream cin(folder() / "config.json");
  const json cfg = json::parse(cin);
  const auto method = quant::quant_method_from_config(cfg["quantization_config"], "config.json");
  const auto ref = reference_file();
  // The JSON is kept alive for the loop: items() of a member of a temporary dangles (ASan: use after free).
  const json expected = expected_json();
  for (const auto& [module, cls] : expected["dequantized"].items()) {
    const Tensor want = ref.tensor(module + ".dequantized");
    std::vector<std::string> consumed;
    const auto w = method->load(sd, module, want.shape(), &md, consumed);
    ASSERT_TRUE(w) << module;
    EXPECT_EQ(w->scheme(), GetParam().scheme) << module << " (" << cls << ")";
    const auto got = w->dequantize(DType::f32).to_f32_vector();
    const auto r = want.to_f32_vector();
    ASSERT_EQ(got.size(), r.size());
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &r[i], 4) != 0;
    EXPECT_EQ(diff, 0u) << module << ": " << diff << " of " << got.size() << " values differ";
  }
}

TEST_P(TorchaoBinConfigs, PipelineWithinTheSchemesBound) {
  const json e = expected_json();
  const json& call = e["call"];
  const fs::path root = pipeline_with_transformer(fs::temp_directory_path() / (std::string("diffq_torchao_bin_") + GetParam().tag + "-" + std::to_string(::getpid())),
                                                  folder());
  const RemovedAtExit cleanup{root};
  auto pipe = FluxPipeline::from_pretrained(root, DType::f32);
  EXPECT_EQ(pipe->quantization.at("transformer"), GetParam().label);
  auto o = diffq::testing::flux_latent_call(call);
  const Tensor got = (*pipe)(o).latents;
  const Tensor want = reference_file().tensor("latents");
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.to_f32_vector(), w = want.to_f32_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num = std::max(num, std::abs(double(g[i]) - double(w[i])));
    den = std::max(den, std::abs(double(w[i])));
  }
  std::printf("[ latents  ] %s: max rel err %.3g vs Diffusers loading the .bin\n", GetParam().tag, num / den);
  EXPECT_LE(num / den, GetParam().bound) << "max |d| " << num << ", max |ref| " << den;
  std::error_code ec;
  fs::remove_all(root, ec);
}

INSTANTIATE_TEST_SUITE_P(Configs, TorchaoBinConfigs,
                         ::testing::Values(BinCase{"int8dq", "torchao_int8dq",
                                                   "torchao Int8DynamicActivationInt8WeightConfig (pre-quantized)", 5e-3},
                                           BinCase{"fp8wo", "torchao_float8wo",
                                                   "torchao Float8WeightOnlyConfig (pre-quantized)", 1e-4}),
                         [](const auto& i) { return std::string(i.param.tag); });

}  // namespace
