// The CPU scaled-dot-product attention (ops::sdpa) on FLUX's shapes, f32 and bf16 inputs, with the
// diffq thread count set to the benchmark's (GEMM_BENCH_THREADS="1,2" by default, as the GEMM
// benchmarks). Shapes: FLUX-small at 512x512 (12 heads, 1024 image + 128 text tokens, D 64), FLUX.1-dev
// at 1024x1024 (24 heads, 4096 + 512 tokens, D 128; one call is ~260 GFLOP, so one iteration), and
// the small shape with an additive f32 mask [1, 1, S, S]. Counters:
//   GFLOP/s   2 * B * H * Sq * Sk * (D + Dv) / wall time
//   %peak     GFLOP/s over this process's own FMA ceiling at the same thread count, measured once at
//             start-up with bench_fma_peak's loop (x86-64 only; absent elsewhere). On a shared machine
//             both figures drop when other processes take the cores: bracket runs with
//             `bench_fma_peak` and discard those where its 2-thread figure is low.
// bf16 inputs run on each of the CPU tiles that can run here (backend/cpu/tuning.h AttentionKernel):
// .../bf16/f32 (widened), .../bf16/bf16-dot (vdpbf16ps), .../bf16/onednn (oneDNN's bf16 matmul for
// Q K^T and P V), and .../bf16/best (the default). Issue 36's shapes: FLUX's joint sequence at 512x512
// (24 heads, 1024 + 512 tokens, D 128) and 1024x1024 with fewer tokens (L 4096), Wan2.1-1.3B (12 heads,
// D 128) self attention at 480x832 with 9 frames (4680 tokens) and its cross attention (512 text keys).
// ATTN_BENCH_BQ / ATTN_BENCH_BK replace the tuning's attention tile sizes (backend/cpu/tuning.h).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/attention_amx.h"
#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "diffq/tensor.h"
#include "ops/ops.h"
#include "fma_loop.h"
#include "gemm_bench_common.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

struct Case {
  std::string name;
  int64_t b, h, sq, sk, d;
  bool masked;
};

using gemm_bench::thread_counts;

Tensor random_tensor(const Shape& shape, DType dt, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
  return t.to(dt);
}

#if defined(__x86_64__)
using fma_bench::fma_loop;

// GFLOP/s of `threads` threads running the FMA loop (best of 3 runs of ~0.1 s).
double fma_peak(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  constexpr int64_t kLoops = 4'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(fma_loop, kLoops);
    fma_loop(kLoops);
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(kLoops) * fma_bench::kFlopPerLoop * threads / s * 1e-9);
  }
  return cache[threads] = best;
}
#endif

void bench_sdpa(benchmark::State& state, const Case& c, DType dt, int threads,
                cpu::AttentionKernel kernel = cpu::AttentionKernel::best) {
  cpu::set_num_threads(threads);
  const Tensor q = random_tensor({c.b, c.h, c.sq, c.d}, dt, 1, -1.f, 1.f);
  const Tensor k = random_tensor({c.b, c.h, c.sk, c.d}, dt, 2, -1.f, 1.f);
  const Tensor v = random_tensor({c.b, c.h, c.sk, c.d}, dt, 3, -1.f, 1.f);
  const Tensor mask = c.masked ? random_tensor({1, 1, c.sq, c.sk}, DType::f32, 4, -4.f, 0.f) : Tensor();
  // ATTN_BENCH_BQ / ATTN_BENCH_BK override the tuning's tile sizes (for sweeps).
  cpu::Tuning tune = cpu::current_tuning();
  if (kernel != cpu::AttentionKernel::best) tune.attention_kernel = kernel;
  if (const char* e = std::getenv("ATTN_BENCH_BQ")) tune.attn_bq = std::atoll(e);
  if (const char* e = std::getenv("ATTN_BENCH_BK")) tune.attn_bk = std::atoll(e);
  cpu::ScopedTuning scope(tune);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Tensor o = ops::sdpa(q, k, v, mask);
    benchmark::DoNotOptimize(o.data_ptr());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flop = 2.0 * double(c.b * c.h) * double(c.sq) * double(c.sk) * double(2 * c.d);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
#if defined(__x86_64__)
  state.counters["%peak"] = flop * double(state.iterations()) * 1e-9 / secs * 100.0 / fma_peak(threads);
#endif
  cpu::set_num_threads(0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = {
      {"flux_small", 1, 12, 1152, 1152, 64, false},
      {"flux_small_masked", 1, 12, 1152, 1152, 64, true},
      {"flux_dev", 1, 24, 4608, 4608, 128, false},
  };
  // Issue 36: bf16 on each tiles kind.
  const std::vector<Case> bf16_cases = {
      {"flux_joint_L1536", 1, 24, 1536, 1536, 128, false},
      {"flux_joint_L4096", 1, 24, 4096, 4096, 128, false},
      {"wan13_self_L4680", 1, 12, 4680, 4680, 128, false},
      {"wan13_cross_L4680x512", 1, 12, 4680, 512, 128, false},
      // the bench/compare.sh runs': wan-small 17 x 256 x 256 (1280 tokens), flux-dev-width 256 x 256
      // (256 image + 512 text tokens)
      {"wan_small_self_L1280", 1, 12, 1280, 1280, 128, false},
      {"wan_small_cross_L1280x512", 1, 12, 1280, 512, 128, false},
      {"flux_joint_L768", 1, 24, 768, 768, 128, false},
  };
  std::vector<std::pair<std::string, cpu::AttentionKernel>> kernels = {{"best", cpu::AttentionKernel::best},
                                                                       {"f32", cpu::AttentionKernel::f32}};
  if (cpu::bf16_dot_gemm_usable()) kernels.emplace_back("bf16-dot", cpu::AttentionKernel::bf16_dot);
  if (cpu::attention_onednn_usable()) kernels.emplace_back("onednn", cpu::AttentionKernel::onednn);
  if (cpu::attention_amx_usable()) kernels.emplace_back("amx", cpu::AttentionKernel::amx);
  for (const int t : thread_counts())
    for (const Case& c : bf16_cases)
      for (const auto& [kname, k] : kernels) {
        const std::string name = "sdpa_tiles/" + c.name + "/bf16/" + kname + "/threads:" + std::to_string(t);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [c, t, k = k](benchmark::State& st) {
          bench_sdpa(st, c, DType::bf16, t, k);
        });
        b->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
        b->Iterations(c.sq * c.sk > 4'000'000 ? 1 : 2);
      }
#if defined(__x86_64__)
  for (const int t : thread_counts()) fma_peak(t);  // calibrate before the runs
#endif
  for (const DType dt : {DType::f32, DType::bf16})
    for (const int t : thread_counts())
      for (const Case& c : cases) {
        const std::string name = "sdpa/" + c.name + "/" + (dt == DType::f32 ? "f32" : "bf16") +
                                 "/threads:" + std::to_string(t);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [c, dt, t](benchmark::State& st) {
          bench_sdpa(st, c, dt, t);
        });
        b->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
        if (c.sq > 2048) b->Iterations(1);
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
