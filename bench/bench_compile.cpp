// Compiled vs eager transformer step on a builtin FLUX config (random weights, f32, CPU): step time,
// activation peak (allocator peak minus the weights), and compile time of full vs regional compile;
// then max-autotune (full compile): its first run with a fresh cache file (compile + tuning), a second
// compiled module reusing the file (nothing timed), regional max-autotune on the same file, and an A/B
// of the default and the tuned full compile, one step each in turn (the machine may be shared); before
// that an A/B of full compile without and with concat elision (elide_concat); last, eager and full compile
// in turn on two models with the same weights.
// BENCH_COMPILE_QUANT=<--quant shorthand> (e.g. q8_0, int8wo, nf4) quantizes both models' linears first, and
// the first A/B is then full compile without and with fuse_dequant (dequantize inside the GEMM);
// BENCH_COMPILE_NO_AUTOTUNE=1 skips the max-autotune part.
// A micro benchmark: one process, a few steps; run it on a quiet machine for numbers.
//   bench_compile [config=flux-small] [image_side=256] [text_tokens=64] [steps=3] [autotune_cache=a fresh temp file]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <string>

#include "compile/compiled_module.h"
#include "diffq/memory.h"
#include "models/flux/flux_builtin.h"
#include "modules/quantize_on_load.h"
#include "modules/random_init.h"
#include "quant/quant_method.h"

using namespace diffq;
using namespace diffq::models::flux;
using clock_type = std::chrono::steady_clock;

namespace {

Tensor randn_like_inputs(const Shape& s, uint64_t seed) {
  std::vector<float> v(size_t(shape_numel(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = float(double(x % 20001) / 10000.0 - 1.0);
  }
  return Tensor::from_vector(v, s);
}

struct Inputs {
  Tensor hidden, encoder, pooled, timestep, guidance, txt_ids, img_ids;
};

double seconds(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct Result {
  double first_s = 0, step_s = 0;
  int64_t activation_peak = 0;
};

Result measure(FluxTransformer2DModel& m, const Inputs& in, int steps, int64_t weights) {
  Result r;
  auto step = [&] {
    return m(in.hidden, in.encoder, in.pooled, in.timestep, in.guidance, in.txt_ids, in.img_ids);
  };
  reset_peak_memory_stats(Device::cpu());
  auto t0 = clock_type::now();
  step();  // compiles on the first call when compiled
  r.first_s = seconds(t0);
  reset_peak_memory_stats(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).current_bytes;
  t0 = clock_type::now();
  for (int i = 0; i < steps; ++i) step();
  r.step_s = seconds(t0) / steps;
  r.activation_peak = memory_stats(Device::cpu()).peak_bytes - base;
  (void)weights;
  return r;
}

// The model's linears quantized with BENCH_COMPILE_QUANT's scheme (nothing when unset).
void maybe_quantize(FluxTransformer2DModel& m) {
  const char* q = std::getenv("BENCH_COMPILE_QUANT");
  if (q == nullptr || *q == '\0') return;
  const auto [backend, kwargs] = quant::quant_shorthand(q, "float32");
  quantize_module(m, *quant::make_quant_method(backend, kwargs));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "flux-small";
  const int64_t side = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t T = argc > 3 ? std::atoll(argv[3]) : 64;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 3;
  const FluxBuiltin b = builtin_flux(name);
  FluxTransformer2DModel m(b.transformer);
  init_parameters_randn(m, DType::f32, 1);
  maybe_quantize(m);
  const int64_t weights = memory_stats(Device::cpu()).current_bytes;
  const auto& c = b.transformer;
  const int64_t N = (side / 16) * (side / 16);
  Inputs in;
  in.hidden = randn_like_inputs({1, N, c.in_channels}, 1);
  in.encoder = randn_like_inputs({1, T, c.joint_attention_dim}, 2);
  in.pooled = randn_like_inputs({1, c.pooled_projection_dim}, 3);
  in.timestep = Tensor::full({1}, 0.5, DType::f32);
  if (c.guidance_embeds) in.guidance = Tensor::full({1}, 3.5, DType::f32);
  in.txt_ids = Tensor::zeros({T, 3}, DType::f32);
  std::vector<float> ids(size_t(N * 3), 0.f);
  for (int64_t i = 0; i < N; ++i) {
    ids[size_t(i * 3 + 1)] = float(i / (side / 16));
    ids[size_t(i * 3 + 2)] = float(i % (side / 16));
  }
  in.img_ids = Tensor::from_vector(ids, {N, 3});

  const char* quant = std::getenv("BENCH_COMPILE_QUANT");
  const bool quantized = quant != nullptr && *quant != '\0';
  std::printf("%s%s%s, %lldx%lld image (%lld tokens) + %lld text tokens, f32, %d timed steps\n", name.c_str(),
              quantized ? " + " : "", quantized ? quant : "", (long long)side, (long long)side, (long long)N,
              (long long)T, steps);
  // BENCH_COMPILE_AB_ONLY=1: only the last A/B (eager vs full compile in turn), e.g. to compare passes
  // switched off with DIFFQ_COMPILE_DISABLE under the same load.
  if (std::getenv("BENCH_COMPILE_AB_ONLY") == nullptr) {
    const Result eager = measure(m, in, steps, weights);
    std::printf("eager     step %.3f s  activation peak %.1f MiB\n", eager.step_s, eager.activation_peak / 1048576.0);

    m.compile(compile::CompileOptions{});
    const Result full = measure(m, in, steps, weights);
    const double full_compile = m.compiled_modules()[0]->stats().compile_seconds;
    std::printf("full      step %.3f s  activation peak %.1f MiB  compile %.3f s  (%.2fx eager, peak %.2fx)\n",
                full.step_s, full.activation_peak / 1048576.0, full_compile, eager.step_s / full.step_s,
                double(full.activation_peak) / double(eager.activation_peak));

    m.compile_repeated_blocks(compile::CompileOptions{});
    const Result regional = measure(m, in, steps, weights);
    double regional_compile = 0;
    for (const auto* cm : m.compiled_modules()) regional_compile += cm->stats().compile_seconds;
    std::printf("regional  step %.3f s  activation peak %.1f MiB  compile %.3f s  (%.2fx eager, peak %.2fx; "
                "compile %.2fx full's)\n",
                regional.step_s, regional.activation_peak / 1048576.0, regional_compile, eager.step_s / regional.step_s,
                double(regional.activation_peak) / double(eager.activation_peak), regional_compile / full_compile);

    // A/B under the same load: one step of full compile with options a, then one with options b,
    // alternating; the first call after each compile is not timed. Returns {a s/step, b s/step}.
    auto alternate = [&](const compile::CompileOptions& a, const compile::CompileOptions& b) {
      double t[2] = {0, 0};
      for (int r = 0; r < steps; ++r)
        for (int k = 0; k < 2; ++k) {
          m.compile(k == 0 ? a : b);
          m(in.hidden, in.encoder, in.pooled, in.timestep, in.guidance, in.txt_ids, in.img_ids);
          const auto t0 = clock_type::now();
          m(in.hidden, in.encoder, in.pooled, in.timestep, in.guidance, in.txt_ids, in.img_ids);
          t[k] += seconds(t0);
        }
      return std::pair<double, double>{t[0] / steps, t[1] / steps};
    };
    compile::CompileOptions without;
    (quantized ? without.fuse_dequant : without.elide_concat) = false;
    const auto [t_without, t_with] = alternate(without, compile::CompileOptions{});
    std::printf("A/B alternating, %d rounds: full without %s step %.3f s, full step %.3f s (%.3fx)\n", steps,
                quantized ? "fuse_dequant" : "elide_concat", t_without, t_with, t_without / t_with);
    if (quantized) {  // the activation peak without the pass
      m.compile(without);
      const Result r = measure(m, in, steps, weights);
      std::printf("full without fuse_dequant: activation peak %.1f MiB (%.2fx eager)\n", r.activation_peak / 1048576.0,
                  double(r.activation_peak) / double(eager.activation_peak));
    }
    if (std::getenv("BENCH_COMPILE_NO_AUTOTUNE") != nullptr) goto ab;

    const std::string cache = argc > 5 ? std::string(argv[5])
                                       : (std::filesystem::temp_directory_path() /
                                          ("diffq_bench_autotune_" + std::to_string(getpid()) + ".json"))
                                             .string();
    if (argc <= 5) std::filesystem::remove(cache);
    compile::CompileOptions at;
    at.mode = compile::CompileMode::max_autotune;
    at.autotune_cache = cache;
    auto autotuned = [&](const char* label, bool regional_compile_) {
      if (regional_compile_) m.compile_repeated_blocks(at);
      else m.compile(at);
      const Result r = measure(m, in, steps, weights);
      double comp = 0;
      compile::AutotuneStats a;
      for (const auto* cm : m.compiled_modules()) {
        const auto st = cm->stats();
        comp += st.compile_seconds;
        a.nodes += st.autotune.nodes, a.tuned += st.autotune.tuned, a.candidates += st.autotune.candidates;
        a.cache_hits += st.autotune.cache_hits, a.non_default += st.autotune.non_default, a.seconds += st.autotune.seconds;
      }
      std::printf("%s step %.3f s  first run %.3f s (compile %.3f s, tuning %.3f s: %lld nodes, %lld timed with %lld "
                  "candidates, %lld from the cache, %lld not default)  (%.2fx eager, %.2fx full)\n",
                  label, r.step_s, r.first_s, comp, a.seconds, (long long)a.nodes, (long long)a.tuned,
                  (long long)a.candidates, (long long)a.cache_hits, (long long)a.non_default, eager.step_s / r.step_s,
                  full.step_s / r.step_s);
      return r;
    };
    std::printf("max-autotune, cache %s\n", cache.c_str());
    autotuned("tune-full  (fresh cache) ", false);
    autotuned("tune-full  (cache reused)", false);
    autotuned("tune-regional (reused)   ", true);
    // The default and the tuned full compile (the cache reused) under the same load.
    const auto [t_default, t_tuned] = alternate(compile::CompileOptions{}, at);
    std::printf("A/B alternating, %d rounds: full step %.3f s, tuned full step %.3f s (%.3fx)\n", steps,
                t_default, t_tuned, t_default / t_tuned);
    if (argc <= 5) std::filesystem::remove(cache);
  }
ab:
  // Eager and full compile under the same load: a second, uncompiled model with the same weights, one
  // step of each in turn (the machine's speed drifts between the separate measurements above).
  {
    FluxTransformer2DModel e(b.transformer);
    init_parameters_randn(e, DType::f32, 1);
    maybe_quantize(e);
    m.compile(compile::CompileOptions{});
    auto run = [&](FluxTransformer2DModel& x) {
      return x(in.hidden, in.encoder, in.pooled, in.timestep, in.guidance, in.txt_ids, in.img_ids);
    };
    run(m);
    run(e);
    double t[2] = {0, 0};
    for (int r = 0; r < steps; ++r)
      for (int k = 0; k < 2; ++k) {
        const auto t0 = clock_type::now();
        run(k == 0 ? e : m);
        t[k] += seconds(t0);
      }
    std::printf("A/B alternating, %d rounds: eager step %.3f s, full step %.3f s (%.3fx eager)\n", steps,
                t[0] / steps, t[1] / steps, t[0] / t[1]);
  }
  return 0;
}
