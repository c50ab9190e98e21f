// max-autotune: an autotuned compiled FLUX transformer (a builtin config cut to one block of each kind)
// equals eager; the first run times candidates and writes the cache file (atomically, merged with
// other processors' entries); a fresh compiled module on the same file times nothing and gets the
// same choices, which the executor installs around the kernels; the processor is part of the key; a
// malformed cache file is an error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/compile/autotune_candidates.h"
#include "backend/cpu/compile/cpu_compile_backend.h"
#include "backend/cpu/compile/tuning_json.h"
#include "backend/cpu/tuning.h"
#include "compile/autotune.h"
#include "compile/compiled_module.h"
#include "compile_test_util.h"
#include "diffq/error.h"
#include "diffq/runtime.h"
#include "models/flux/flux_builtin.h"
#include "models/flux/flux_transformer.h"
#include "modules/random_init.h"
#include "ops/op.h"

using namespace diffq;
using namespace diffq::compile;
using backend::cpu::autotune_candidates;
using backend::cpu::GemmSplit;
using backend::cpu::processor_key;
using backend::cpu::Tuning;
using compile_test::max_rel;
using models::flux::FluxTransformer2DModel;
namespace fs = std::filesystem;

namespace {

Tensor randn(const Shape& s, uint64_t seed) { return compile_test::randn(s, seed, DType::f32, 1.f); }

// flux-small's widths cut to 2 heads of 64, one block of each kind; 16 x 16 image tokens + 32 text
// tokens: its GEMMs are big enough to be split over threads, its attention has 288 query rows.
struct Small {
  std::unique_ptr<FluxTransformer2DModel> model;
  std::vector<Tensor> in;  // hidden, encoder, pooled, timestep, guidance, txt_ids, img_ids
  Tensor eager;

  Small() {
    auto c = models::flux::builtin_flux("flux-small").transformer;
    c.num_layers = 1;
    c.num_single_layers = 1;
    c.num_attention_heads = 2;
    model = std::make_unique<FluxTransformer2DModel>(c);
    init_parameters_randn(*model, DType::f32, 7);
    const int64_t side = 16, N = side * side, T = 32;
    std::vector<float> ids(size_t(N * 3), 0.f);
    for (int64_t i = 0; i < N; ++i) {
      ids[size_t(i * 3 + 1)] = float(i / side);
      ids[size_t(i * 3 + 2)] = float(i % side);
    }
    in = {randn({1, N, c.in_channels}, 1), randn({1, T, c.joint_attention_dim}, 2),
          randn({1, c.pooled_projection_dim}, 3), Tensor::full({1}, 0.5, DType::f32),
          Tensor::full({1}, 3.5, DType::f32), Tensor::zeros({T, 3}, DType::f32), Tensor::from_vector(ids, {N, 3})};
    model->uncompile();
    eager = run();
  }
  Tensor run() { return (*model)(in[0], in[1], in[2], in[3], in[4], in[5], in[6]); }
};

Small& small() {
  static Small s;
  return s;
}

// A fresh folder per test.
fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("diffq_autotune_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

CompileOptions tune_options(const fs::path& cache) {
  CompileOptions o;
  o.mode = CompileMode::max_autotune;
  o.fullgraph = true;
  o.autotune_cache = cache.string();
  o.autotune_reps = 2;            // fast: the choices need not be good, only made
  o.autotune_max_candidates = 3;
  return o;
}

AutotuneStats total(const FluxTransformer2DModel& m) {
  AutotuneStats t;
  for (const CompiledModule* cm : m.compiled_modules()) {
    const AutotuneStats s = cm->stats().autotune;
    t.nodes += s.nodes, t.tuned += s.tuned, t.candidates += s.candidates, t.cache_hits += s.cache_hits;
    t.non_default += s.non_default, t.seconds += s.seconds;
  }
  return t;
}

TuningTable choices(const FluxTransformer2DModel& m) {
  TuningTable t;
  for (const CompiledModule* cm : m.compiled_modules())
    for (const auto& [k, v] : cm->autotune_choices()) t[k] = v;
  return t;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::trunc);
  f << s;
}

std::vector<std::string> files_in(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  return out;
}

// Spy kernels: record the tuning each linear / sdpa call runs under, then run the real kernel.
ops::KernelFn g_real_linear = nullptr, g_real_sdpa = nullptr;
std::vector<Tuning> g_seen_linear, g_seen_sdpa;
void spy_linear(const ops::OpCall& c, Tensor& out) {
  g_seen_linear.push_back(backend::cpu::current_tuning());
  g_real_linear(c, out);
}
void spy_sdpa(const ops::OpCall& c, Tensor& out) {
  g_seen_sdpa.push_back(backend::cpu::current_tuning());
  g_real_sdpa(c, out);
}
struct SpyKernels {
  SpyKernels() {
    g_real_linear = ops::find_kernel(ops::OpKind::linear, DeviceKind::cpu);
    g_real_sdpa = ops::find_kernel(ops::OpKind::sdpa, DeviceKind::cpu);
    ops::register_kernel(ops::OpKind::linear, DeviceKind::cpu, spy_linear);
    ops::register_kernel(ops::OpKind::sdpa, DeviceKind::cpu, spy_sdpa);
    g_seen_linear.clear();
    g_seen_sdpa.clear();
  }
  ~SpyKernels() {
    ops::register_kernel(ops::OpKind::linear, DeviceKind::cpu, g_real_linear);
    ops::register_kernel(ops::OpKind::sdpa, DeviceKind::cpu, g_real_sdpa);
  }
};

}  // namespace

TEST(Autotune, FirstRunTimesAndWritesTheCacheSecondModuleTimesNothing) {
  Small& s = small();
  const fs::path dir = temp_dir("reuse"), file = dir / "autotune.json";
  const CompileOptions o = tune_options(file);

  s.model->compile(o);
  EXPECT_LE(max_rel(s.run(), s.eager), 1e-5);
  const AutotuneStats first = total(*s.model);
  EXPECT_GT(first.nodes, 0);
  EXPECT_GT(first.tuned, 0);
  EXPECT_GT(first.candidates, first.tuned);  // at least two candidates per tuned node
  EXPECT_GT(first.cache_hits, 0);            // identical nodes (e.g. the q, k, v projections) are timed once
  EXPECT_EQ(first.tuned + first.cache_hits, first.nodes);
  EXPECT_GT(first.seconds, 0);
  const TuningTable chosen = choices(*s.model);
  EXPECT_EQ(int64_t(chosen.size()), first.tuned);
  // Linears fused with their elementwise epilogue (fuse_epilogue, on by default) are tuned too.
  size_t fused_keys = 0;
  for (const auto& [key, t] : chosen) fused_keys += key.rfind("gemm+fused", 0) == 0;
  EXPECT_GT(fused_keys, 0u);
  EXPECT_LE(max_rel(s.run(), s.eager), 1e-5);  // replay of the tuned graph
  EXPECT_EQ(total(*s.model).candidates, first.candidates);  // replays time nothing

  // The file: this processor's section holds every choice; no temporary file is left behind.
  ASSERT_TRUE(fs::exists(file));
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"autotune.json"});
  const nlohmann::json j = read_json(file);
  EXPECT_EQ(j.at("format"), "diffq-autotune");
  const auto& mine = j.at("processors").at(processor_key());
  EXPECT_EQ(mine.size(), chosen.size());
  for (const auto& [key, t] : chosen)
    EXPECT_EQ(backend::cpu::kernel_tuning(backend::cpu::tuning_from_json(mine.at(key), "test")), t) << key;
  std::printf("[autotune] processor '%s': %lld tunable nodes, %lld timed (%lld candidates), %lld hits, %lld "
              "non-default, %.3f s\n",
              processor_key().c_str(), (long long)first.nodes, (long long)first.tuned, (long long)first.candidates,
              (long long)first.cache_hits, (long long)first.non_default, first.seconds);

  // A fresh compiled module on the same file: every node found, nothing timed, the same choices.
  s.model->compile(o);
  EXPECT_LE(max_rel(s.run(), s.eager), 1e-5);
  const AutotuneStats second = total(*s.model);
  EXPECT_EQ(second.candidates, 0);
  EXPECT_EQ(second.tuned, 0);
  EXPECT_EQ(second.nodes, first.nodes);
  EXPECT_EQ(second.cache_hits, first.nodes);
  EXPECT_EQ(second.non_default, first.non_default);
  EXPECT_EQ(choices(*s.model), chosen);
  s.model->uncompile();
  fs::remove_all(dir);
}

TEST(Autotune, RegionalCompileTunesEachKindOfBlockAndReusesTheCache) {
  Small& s = small();
  const fs::path dir = temp_dir("regional"), file = dir / "autotune.json";
  s.model->compile_repeated_blocks(tune_options(file));
  EXPECT_LE(max_rel(s.run(), s.eager), 1e-5);
  const AutotuneStats first = total(*s.model);
  ASSERT_EQ(s.model->compiled_modules().size(), 2u);
  for (const CompiledModule* cm : s.model->compiled_modules()) EXPECT_GT(cm->stats().autotune.nodes, 0);
  EXPECT_GT(first.candidates, 0);
  s.model->compile_repeated_blocks(tune_options(file));
  EXPECT_LE(max_rel(s.run(), s.eager), 1e-5);
  EXPECT_EQ(total(*s.model).candidates, 0);
  EXPECT_EQ(total(*s.model).cache_hits, first.nodes);
  s.model->uncompile();
  fs::remove_all(dir);
}

// The choices in the file are what the kernels run under (installed by the executor), here
// non-default ones written by hand; the result still equals eager.
TEST(Autotune, CachedChoicesAreInstalledAroundTheKernels) {
  Small& s = small();
  const fs::path dir = temp_dir("installed"), file = dir / "autotune.json";
  s.model->compile(tune_options(file));
  s.run();
  s.model->uncompile();
  nlohmann::json j = read_json(file);
  Tuning forced;
  forced.gemm_split = GemmSplit::rows;
  forced.gemm_parts_per_thread = 4;
  forced.attn_bq = 32;
  forced.attn_bk = 512;
  size_t n = 0;
  for (auto& [key, t] : j["processors"][processor_key()].items()) t = backend::cpu::tuning_to_json(forced), ++n;
  ASSERT_GT(n, 0u);
  write_text(file, j.dump());

  SpyKernels spy;
  s.model->compile(tune_options(file));  // kernels are looked up at compile time: the spies
  for (int run = 0; run < 2; ++run) {    // the tuning run (all cache hits) and a replay
    g_seen_linear.clear();
    g_seen_sdpa.clear();
    EXPECT_LE(max_rel(s.run(), s.eager), 1e-5) << run;
    ASSERT_FALSE(g_seen_sdpa.empty());
    for (const Tuning& t : g_seen_sdpa) EXPECT_EQ(t, forced) << run;
    const int64_t forced_linears = std::count(g_seen_linear.begin(), g_seen_linear.end(), forced);
    // Tunable linears run under the file's choice, the small ones (nothing to split) under the defaults.
    if (num_threads() > 1) {  // one thread: no GEMM is tunable
      EXPECT_GT(forced_linears, 0) << run;
    }
    EXPECT_EQ(forced_linears + std::count(g_seen_linear.begin(), g_seen_linear.end(), backend::cpu::current_tuning()),
              int64_t(g_seen_linear.size()));
  }
  EXPECT_EQ(total(*s.model).candidates, 0);
  s.model->uncompile();
  fs::remove_all(dir);
}

TEST(Autotune, TheProcessorIsPartOfTheKeyAndOtherProcessorsAreKept) {
  Small& s = small();
  const fs::path dir = temp_dir("processor"), file = dir / "autotune.json";
  CompileOptions a = tune_options(file), b = a;
  a.autotune_processor = "test CPU A | AVX2 | 2 threads";
  b.autotune_processor = "test CPU B | AVX3 | 2 threads";
  s.model->compile(a);
  s.run();
  const int64_t tuned_a = total(*s.model).tuned;
  ASSERT_GT(tuned_a, 0);
  s.model->compile(b);  // another processor: not a hit
  s.run();
  EXPECT_EQ(total(*s.model).tuned, tuned_a);
  EXPECT_EQ(total(*s.model).cache_hits + total(*s.model).tuned, total(*s.model).nodes);
  const nlohmann::json j = read_json(file);  // both sections, merged
  EXPECT_EQ(j.at("processors").size(), 2u);
  EXPECT_EQ(j["processors"][a.autotune_processor].size(), size_t(tuned_a));
  EXPECT_EQ(j["processors"][b.autotune_processor].size(), size_t(tuned_a));
  s.model->compile(a);  // A again: all hits
  s.run();
  EXPECT_EQ(total(*s.model).candidates, 0);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"autotune.json"});
  s.model->uncompile();
  fs::remove_all(dir);
}

TEST(Autotune, MalformedCacheFileIsAnErrorNamingIt) {
  Small& s = small();
  const fs::path dir = temp_dir("malformed"), file = dir / "autotune.json";
  auto error_of = [&](const std::string& content) {
    write_text(file, content);
    s.model->compile(tune_options(file));
    std::string msg;
    try {
      s.run();
    } catch (const Error& e) {
      msg = e.what();
    }
    s.model->uncompile();
    return msg;
  };
  const std::string proc = "\"processors\": {\"x | AVX2 | 2 threads\": {\"linear k\": ";
  const std::string head = "{\"format\": \"diffq-autotune\", \"version\": 1, ";
  struct Case {
    std::string content, expect;
  } cases[] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "must hold a JSON object"},
      {"{\"format\": \"other\", \"version\": 1, \"processors\": {}}", "\"format\""},
      {"{\"format\": \"diffq-autotune\", \"version\": 9, \"processors\": {}}", "version"},
      {head + proc + "{\"gemm_split\": \"diagonal\"}}}}", "unknown gemm_split 'diagonal'"},
      {head + proc + "{\"tile\": 3}}}}", "unknown field 'tile'"},
      {head + proc + "{\"attn_bq\": -4}}}}", "\"attn_bq\" must be a positive integer, got -4"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.content);
    EXPECT_NE(msg.find(file.string()), std::string::npos) << c.content << " -> " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.content << " -> " << msg;
  }
  // The bad file is left as it was (not replaced by a run that failed).
  std::ifstream f(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), cases[std::size(cases) - 1].content);
  fs::remove_all(dir);
}

TEST(Autotune, CachePathAndProcessorKey) {
  const char* keep[] = {"DIFFQ_AUTOTUNE_CACHE", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* k : keep)
    if (const char* v = std::getenv(k)) saved.emplace_back(k, v);
  for (const char* k : keep) unsetenv(k);
  EXPECT_THROW(autotune_cache_path(""), Error);
  setenv("HOME", "/h", 1);
  EXPECT_EQ(autotune_cache_path(""), fs::path("/h/.cache/diffq/autotune.json"));
  setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(autotune_cache_path(""), fs::path("/x/diffq/autotune.json"));
  setenv("DIFFQ_AUTOTUNE_CACHE", "/d/t.json", 1);
  EXPECT_EQ(autotune_cache_path(""), fs::path("/d/t.json"));
  EXPECT_EQ(autotune_cache_path("/o.json"), fs::path("/o.json"));
  for (const char* k : keep) unsetenv(k);
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);

  const std::string key = processor_key();
  EXPECT_NE(key.find(" | "), std::string::npos);
  EXPECT_NE(key.find(std::to_string(num_threads()) + " threads"), std::string::npos) << key;
}

TEST(Autotune, CandidatesFollowTheShape) {
  Node n;
  n.op = ops::OpKind::linear;
  auto linear_call = [](int64_t m, int64_t k, int64_t nn) {
    return ops::OpCall{ops::OpKind::linear, {Tensor::zeros({m, k}, DType::f32), Tensor::zeros({nn, k}, DType::f32)}, {}};
  };
  EXPECT_TRUE(autotune_candidates(n, linear_call(8, 16, 16), 4).empty());  // too small to be split
  EXPECT_TRUE(autotune_candidates(n, linear_call(256, 256, 256), 1).empty());  // one thread
  const auto big = autotune_candidates(n, linear_call(256, 256, 256), 2);
  ASSERT_GE(big.size(), 5u);
  EXPECT_EQ(big[0], Tuning{});
  for (size_t i = 1; i < big.size(); ++i) EXPECT_NE(big[i], Tuning{});
  EXPECT_EQ(std::count_if(big.begin(), big.end(), [](const Tuning& t) { return t.gemm_split == GemmSplit::none; }), 1);

  n.op = ops::OpKind::sdpa;
  auto sdpa_call = [](int64_t sq, int64_t sk) {
    return ops::OpCall{ops::OpKind::sdpa,
                       {Tensor::zeros({1, 1, sq, 8}, DType::f32), Tensor::zeros({1, 1, sk, 8}, DType::f32),
                        Tensor::zeros({1, 1, sk, 8}, DType::f32)},
                       {}};
  };
  EXPECT_TRUE(autotune_candidates(n, sdpa_call(16, 16), 2).empty());  // every tiling is one tile
  EXPECT_EQ(autotune_candidates(n, sdpa_call(100, 100), 2).size(), 4u);  // bq 48 (default), 24, 96, 100
  EXPECT_EQ(autotune_candidates(n, sdpa_call(4096, 4096), 2).size(), 16u);
  EXPECT_EQ(autotune_candidates(n, sdpa_call(4096, 4096), 1).size(), 16u);  // tiles matter on one thread too
}
