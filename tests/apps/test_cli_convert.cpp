// `diffq quantize` from pre-quantized sources (issue 19): every format diffq reads (bitsandbytes, torchao
// incl. .bin, quanto, GGUF, BFL fp8r/nvfp4, ModelOpt, SDNQ, AutoRound, Nunchaku Lite) converted to a
// Diffusers folder of another scheme and to a GGUF file. Each converted weight must equal, bit for bit,
// the target scheme applied directly to the source's dequantized weight (QuantizedWeight::dequantize, the
// library-exact reference tested in tests/quant; ModelOpt's pre_quant_scale folded into the columns here
// by the test itself); the written folder / file loads, generates, and `diffq inspect` names the target.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "io/safetensors.h"
#include "pipelines/flux_pipeline.h"
#include "quant/bfl/scaled_weight.h"
#include "quant/gguf/gguf_quants.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/nunchaku/nunchaku.h"
#include "quant/quant_method.h"

namespace {

namespace fs = std::filesystem;
using namespace diffq;
using diffq::testing::run_cli;

const fs::path kFix = fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures";
const std::string kTiny = (kFix / "tiny-flux").string();
const std::string kGen = "generate -p 'a red fox' --steps 2 --width 32 --height 32 --output-type latent ";

class CliConvert : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("diffq-cliconv-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// The tiny pipeline with its transformer folder replaced (symlinks; nothing copied).
fs::path pipeline_with_transformer(const fs::path& root, const fs::path& transformer) {
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

std::unique_ptr<FluxPipeline> load(const fs::path& folder, const fs::path& file = {}) {
  FluxPipelineLoadOptions o;
  o.load_text_encoders = false;
  o.transformer_file = file;
  return FluxPipeline::from_pretrained(folder, DType::f32, o);
}

// The source parameter as the test's own oracle sees it, float32: the library-exact dequantization, with
// ModelOpt's AWQ / SmoothQuant pre_quant_scale multiplied into the columns; Nunchaku's dequantize()
// already folds its smoothing and low-rank branch. Dense parameters as they are; a packed Nunchaku
// Linear's bias in logical order.
Tensor oracle_dense(const Module& m, const std::string& name) {
  const auto params = m.named_parameters();
  const Parameter* p = nullptr;
  for (const auto& [k, v] : params)
    if (k == name) p = v;
  EXPECT_TRUE(p) << name;
  if (p->is_quantized()) {
    Tensor w = p->quantized().dequantize(DType::f32).contiguous();
    if (const auto* s = dynamic_cast<const quant::ScaledWeight*>(&p->quantized()); s && s->pre_quant_scale().defined()) {
      const int64_t n = w.size(0), k = w.size(1);
      const float* pqs = s->pre_quant_scale().data<float>();
      Tensor f = Tensor::empty({n, k}, DType::f32);
      for (int64_t i = 0; i < n * k; ++i) f.data<float>()[i] = w.data<float>()[i] * pqs[i % k];
      return f;
    }
    return w;
  }
  const std::string suffix = ".bias";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string wn = name.substr(0, name.size() - suffix.size()) + ".weight";
    for (const auto& [k, v] : params)
      if (k == wn && v->is_quantized())
        if (const auto* sv = dynamic_cast<const quant::nunchaku::SvdqW4A4Weight*>(&v->quantized()); sv && sv->packed())
          return Tensor::from_vector(sv->logical_bias(p->dense()), p->shape());
  }
  return p->dense().to(DType::f32);
}

size_t bit_diffs(const Tensor& a, const Tensor& b) {
  const auto x = a.to_f32_vector(), y = b.to_f32_vector();
  if (x.size() != y.size()) return size_t(-1);
  size_t d = 0;
  for (size_t i = 0; i < x.size(); ++i) d += std::memcmp(&x[i], &y[i], 4) != 0;
  return d;
}

struct Compared {
  int64_t quantized = 0, converted_from_quantized = 0;
};

// Every parameter of the converted transformer against the target applied to the source directly.
// `target` null: a GGUF file (each quantized weight's own type is the target; dense tensors are F32 or
// F16, so they match the oracle either exactly or through float16).
Compared expect_converted(const Module& src, const Module& out, const quant::QuantMethod* target) {
  Compared c;
  std::map<std::string, const Parameter*> sp;
  for (const auto& [k, v] : src.named_parameters()) sp[k] = v;
  for (const auto& [name, p] : out.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(sp.count(name));
    if (!sp.count(name)) continue;
    const Tensor want_dense = oracle_dense(src, name);
    if (p->is_quantized()) {
      const std::string module = name.substr(0, name.rfind('.'));
      std::shared_ptr<QuantizedWeight> want;
      if (target) {
        want = target->quantize_named(module, want_dense);
      } else {
        const auto* g = dynamic_cast<const quant::GGUFQuantizedWeight*>(&p->quantized());
        EXPECT_TRUE(g);
        if (!g) continue;
        const auto m = quant::make_quant_method(
            "gguf", {{"type", std::string(quant::gguf::find_type(g->type())->name())}, {"compute_dtype", "float32"}});
        want = m->quantize(want_dense);
      }
      EXPECT_EQ(p->quantized().scheme(), want->scheme());
      EXPECT_EQ(bit_diffs(p->quantized().dequantize(DType::f32), want->dequantize(DType::f32)), 0u);
      ++c.quantized;
      c.converted_from_quantized += sp[name]->is_quantized();
    } else if (target) {
      EXPECT_EQ(bit_diffs(p->dense(), want_dense), 0u);
    } else {
      EXPECT_TRUE(bit_diffs(p->dense(), want_dense) == 0 ||
                  bit_diffs(p->dense(), want_dense.to(DType::f16).to(DType::f32)) == 0);
    }
  }
  return c;
}

std::unique_ptr<quant::QuantMethod> saved_method(const fs::path& folder) {
  std::ifstream in(folder / "transformer" / "config.json");
  const auto cfg = nlohmann::json::parse(in);
  return quant::quant_method_from_config(cfg.at("quantization_config"), "config.json");
}

std::vector<float> latents(const fs::path& f) {
  return io::SafetensorsFile::open(f).tensor("latents").to_f32_vector();
}

// The converted folder (or GGUF transformer) generates; its latents are finite and close to the source's.
void expect_generates(const fs::path& dir, const std::string& src_args, const std::string& out_args, double bound) {
  const auto a = run_cli(dir, kGen + src_args + " -o src-lat.safetensors");
  ASSERT_EQ(a.status, 0) << a.out;
  const auto b = run_cli(dir, kGen + out_args + " -o out-lat.safetensors");
  ASSERT_EQ(b.status, 0) << b.out;
  const auto x = latents(dir / "src-lat.safetensors"), y = latents(dir / "out-lat.safetensors");
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  const double e = diffq::testing::max_rel(y, x);
  std::printf("[ latents  ] %s vs source: max rel %.3g\n", out_args.c_str(), e);
  EXPECT_LT(e, bound);
}

struct FolderCase {
  std::string name;
  fs::path source;       // pipeline folder
  std::string quant;     // target shorthand
  std::string inspect;   // what `diffq inspect` prints for the written transformer
  std::string from;      // in "converted from ..."
};

void run_folder_case(const fs::path& dir, const FolderCase& fc) {
  SCOPED_TRACE(fc.name);
  const fs::path out = dir / ("out-" + fc.name);
  const auto r = run_cli(dir, "quantize -m " + q(fc.source) + " -o " + q(out) + " --quant " + fc.quant +
                                  " --quantize transformer --dtype float32");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("converted from " + fc.from), std::string::npos) << r.out;
  const auto src = load(fc.source);
  const auto dst = load(out);
  const auto target = saved_method(out);
  const Compared c = expect_converted(*src->transformer, *dst->transformer, target.get());
  EXPECT_GT(c.converted_from_quantized, 0);
  std::printf("[ convert  ] %s -> %s: %lld quantized weights, %lld of them from quantized ones\n", fc.name.c_str(),
              fc.quant.c_str(), (long long)c.quantized, (long long)c.converted_from_quantized);
  const auto i = run_cli(dir, "inspect " + q(out / "transformer"));
  ASSERT_EQ(i.status, 0) << i.out;
  EXPECT_NE(i.out.find(fc.inspect), std::string::npos) << i.out;
}

TEST_F(CliConvert, PreQuantizedFoldersToAnotherScheme) {
  const fs::path bin = pipeline_with_transformer(dir_ / "torchao-bin", kFix / "torch-bin" / "flux-int8wo" / "transformer");
  // bitsandbytes and quanto sources are written by diffq itself (their bytes are checked against the
  // libraries in tests/quant and CliQuantize).
  ASSERT_EQ(run_cli(dir_, "quantize -m " + q(kTiny) + " -o nf4 --quant nf4 --quantize transformer --dtype float32").status, 0);
  ASSERT_EQ(run_cli(dir_, "quantize -m " + q(kTiny) + " -o qint8 --quant quanto-int8 --quantize transformer --dtype float32").status, 0);
  const FolderCase cases[] = {
      {"modelopt", kFix / "quant-bfl-modelopt" / "modelopt-mixed", "nf4", "nf4", "modelopt"},
      {"sdnq", kFix / "quant-sdnq-autoround" / "prequant-sdnq", "int8wo", "Int8WeightOnlyConfig", "sdnq"},
      {"autoround", kFix / "quant-sdnq-autoround" / "prequant-autoround", "quanto-int8", "quanto", "auto"},
      // (sdnq targets quantize none of the tiny model's Linears: its size rules skip them)
      {"nunchaku", kFix / "quant-nunchaku" / "pipeline", "quanto-int4", "quanto", "nunchaku_lite"},
      {"torchao-bin", bin, "nf4", "nf4", "torchao Int8WeightOnlyConfig"},
      {"bnb", dir_ / "nf4", "int8wo", "Int8WeightOnlyConfig", "bitsandbytes_4bit nf4"},
      {"quanto", dir_ / "qint8", "fp4", "fp4", "quanto"},
  };
  for (const auto& fc : cases) run_folder_case(dir_, fc);
  // The converted ModelOpt and Nunchaku folders generate, close to their sources.
  expect_generates(dir_, "-m " + q(cases[0].source), "-m out-modelopt", 0.25);
  expect_generates(dir_, "-m " + q(cases[3].source), "-m out-nunchaku", 0.25);
}

TEST_F(CliConvert, PreQuantizedSingleFilesToAFolder) {
  struct FileCase {
    std::string name;
    fs::path file;
    std::string quant, from;
  };
  for (const FileCase& fc : {FileCase{"bfl", kFix / "quant-bfl-modelopt" / "flux-tiny-bfl.safetensors", "int8wo", "bfl"},
                             FileCase{"gguf", kFix / "tiny-flux-gguf" / "flux1-tiny-dev-mixed.gguf", "nf4", "gguf_"}}) {
    SCOPED_TRACE(fc.name);
    const fs::path out = dir_ / ("out-" + fc.name);
    const auto r = run_cli(dir_, "quantize -m " + q(kTiny) + " --transformer " + q(fc.file) + " -o " + q(out) +
                                     " --quant " + fc.quant + " --quantize transformer --dtype float32");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("converted from " + fc.from), std::string::npos) << r.out;
    const auto src = load(kTiny, fc.file);
    const auto dst = load(out);
    const auto target = saved_method(out);
    const Compared c = expect_converted(*src->transformer, *dst->transformer, target.get());
    EXPECT_GT(c.converted_from_quantized, 0);
    expect_generates(dir_, "-m " + q(kTiny) + " --transformer " + q(fc.file), "-m " + q(out), 0.25);
  }
  // A pre-quantized single file must be selected for conversion.
  const auto r = run_cli(dir_, "quantize -m " + q(kTiny) + " --transformer " +
                                   q(kFix / "quant-bfl-modelopt" / "flux-tiny-bfl.safetensors") +
                                   " -o x --quant nf4 --quantize vae");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("must select the transformer"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

TEST_F(CliConvert, PreQuantizedSourcesToGguf) {
  struct GgufCase {
    std::string name, args;
    fs::path folder, file;
  };
  const fs::path bfl = kFix / "quant-bfl-modelopt" / "flux-tiny-bfl.safetensors";
  const GgufCase cases[] = {
      {"nunchaku", "-m " + q(kFix / "quant-nunchaku" / "pipeline"), kFix / "quant-nunchaku" / "pipeline", {}},
      {"modelopt", "-m " + q(kFix / "quant-bfl-modelopt" / "modelopt-mixed"), kFix / "quant-bfl-modelopt" / "modelopt-mixed", {}},
      {"sdnq", "-m " + q(kFix / "quant-sdnq-autoround" / "prequant-sdnq"), kFix / "quant-sdnq-autoround" / "prequant-sdnq", {}},
      {"bfl", "-m " + q(kTiny) + " --transformer " + q(bfl), kTiny, bfl},
  };
  for (const auto& gc : cases) {
    SCOPED_TRACE(gc.name);
    const std::string out = gc.name + ".gguf";
    const auto r = run_cli(dir_, "quantize " + gc.args + " -o " + out + " --format gguf --type q8_0 --dtype float32");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto src = load(gc.folder, gc.file);
    const auto dst = load(kTiny, dir_ / out);
    const Compared c = expect_converted(*src->transformer, *dst->transformer, nullptr);
    EXPECT_GT(c.converted_from_quantized, 0);
    const auto i = run_cli(dir_, "inspect " + out);
    ASSERT_EQ(i.status, 0) << i.out;
    EXPECT_NE(i.out.find("Q8_0"), std::string::npos) << i.out;
  }
  expect_generates(dir_, "-m " + q(kFix / "quant-nunchaku" / "pipeline"), "-m " + q(kTiny) + " --transformer nunchaku.gguf",
                   0.25);
  // Q4_K (the tiny model's rows are shorter than its 256-element blocks: F16 there, as city96's files).
  const auto r = run_cli(dir_, "quantize -m " + q(kTiny) + " --transformer " + q(bfl) +
                                   " -o bfl-q4k.gguf --format gguf --type q4_K --dtype float32");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto src = load(kTiny, bfl);
  const auto dst = load(kTiny, dir_ / "bfl-q4k.gguf");
  expect_converted(*src->transformer, *dst->transformer, nullptr);
}

}  // namespace
