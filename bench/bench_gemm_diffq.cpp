// diffq's own GEMM entry points (src/backend/cpu/gemm.h) exactly as the engine calls them, with the
// diffq thread count set to the benchmark's. bf16 timings include whatever gemm_bf16 does internally.
// The int8 GEMMs (src/backend/cpu/int8_gemm.h) run on int8_shapes(); their "GFLOP/s" counter is GOP/s
// (2*M*N*K integer ops / s) and pct_2x_fma_peak relates it to twice the FMA peak (vpmaddwd's ceiling)
// of FMA_PEAK_GFLOPS_PER_CORE (default 89, this Zen 3's bench_fma_peak figure per core) x threads.
#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/gemm.h"
#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "gemm_bench_common.h"

using namespace gemm_bench;
namespace cpu = diffq::backend::cpu;

namespace {

void diffq_sgemm(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const auto a = random_f32(size_t(s.m * s.k), 1), b = random_f32(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    cpu::sgemm(false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  cpu::set_num_threads(0);
}

void diffq_gemm_bf16(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const auto a = random_bf16(size_t(s.m * s.k), 1), b = random_bf16(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    cpu::gemm_bf16(false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(),
                   s.n);
    benchmark::DoNotOptimize(c.data());
  }
  cpu::set_num_threads(0);
}

// The FLUX-small linears (C = A @ W^T): M in {1152, 1024, 128} x (N, K) of its layers.
std::vector<Shape> flux_small_shapes() {
  std::vector<Shape> out;
  for (const int64_t m : {1152, 1024, 128})
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
             {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {768, 3840}, {768, 4096}})
      out.push_back({m, n, k});
  return out;
}

// sgemm / gemm_bf16 with the part kernel forced (GemmKernel::diffq, ::diffq_widen for bf16, or
// ::openblas), registered shape by
// shape with both kernels next to each other so that a noisy machine hits both alike.
template <bool kBf16>
void kernel_vs(benchmark::State& state, const Shape& s, int threads, cpu::GemmKernel kernel) {
  cpu::set_num_threads(threads);
  cpu::Tuning tuning;
  tuning.gemm_kernel = kernel;
  cpu::ScopedTuning scope(tuning);
  std::vector<float> c(size_t(s.m * s.n));
  if constexpr (kBf16) {
    const auto a = random_bf16(size_t(s.m * s.k), 1), b = random_bf16(size_t(s.n * s.k), 2);
    for (auto _ : state) {
      cpu::gemm_bf16(false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(), s.n);
      benchmark::DoNotOptimize(c.data());
    }
  } else {
    const auto a = random_f32(size_t(s.m * s.k), 1), b = random_f32(size_t(s.n * s.k), 2);
    for (auto _ : state) {
      cpu::sgemm(false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(), s.n);
      benchmark::DoNotOptimize(c.data());
    }
  }
  cpu::set_num_threads(0);
}

template <bool kBf16>
void register_kernel_vs(const std::string& name) {
  for (const int t : thread_counts())
    for (const Shape& s : flux_small_shapes())
      for (const auto& [tag, kernel] : kBf16 ? std::vector<std::pair<std::string, cpu::GemmKernel>>{
               {"openblas", cpu::GemmKernel::openblas}, {"diffq-widen", cpu::GemmKernel::diffq_widen},
               {"diffq", cpu::GemmKernel::diffq}} : std::vector<std::pair<std::string, cpu::GemmKernel>>{
               {"openblas", cpu::GemmKernel::openblas}, {"diffq", cpu::GemmKernel::diffq}})
        register_shape(name + "_" + tag, s, t, [kernel](benchmark::State& st, const Shape& sh, int th) {
          kernel_vs<kBf16>(st, sh, th, kernel);
        });
}

std::vector<int8_t> random_s8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = int8_t(dist(rng));
  return v;
}

void set_int8_peak(benchmark::State& state, const Shape& s, int threads) {
  const char* env = std::getenv("FMA_PEAK_GFLOPS_PER_CORE");
  const double peak = (env && *env ? std::atof(env) : 89.0) * threads * 2.0;
  const double gop = 2.0 * double(s.m) * double(s.n) * double(s.k) * 1e-9;
  state.counters["pct_2x_fma_peak"] = benchmark::Counter(gop * 100.0 / peak, benchmark::Counter::kIsIterationInvariantRate);
}

// The plain API: packs A every call, writes int32 C.
void diffq_gemm_s8s8s32(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const auto a = random_s8(size_t(s.m * s.k), 1), b = random_s8(size_t(s.n * s.k), 2);
  std::vector<int32_t> c(size_t(s.m * s.n));
  for (auto _ : state) {
    cpu::gemm_s8s8s32(s.m, s.n, s.k, a.data(), s.k, b.data(), s.k, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  set_int8_peak(state, s, threads);
  cpu::set_num_threads(0);
}

// As the int8 linear runs it: A already packed (the quantizer writes that form), per-row / per-column
// scales, bias and the bf16 output fused into the tile stores.
void diffq_gemm_s8_packed_bf16out(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const auto a = random_s8(size_t(s.m * s.k), 1), b = random_s8(size_t(s.n * s.k), 2);
  std::vector<int16_t> ap(cpu::int8_packed_a_elems(s.m, s.k));
  cpu::pack_a_s8(s.m, s.k, a.data(), s.k, ap.data());
  const auto xs = random_f32(size_t(s.m), 3), ws = random_f32(size_t(s.n), 4), bias = random_f32(size_t(s.n), 5);
  std::vector<uint16_t> y(size_t(s.m * s.n));
  cpu::Int8Epilogue ep;
  ep.row_scale = xs.data();
  ep.col_scale = ws.data();
  ep.bias = bias.data();
  ep.out = diffq::DType::bf16;
  ep.y = y.data();
  ep.ldy = s.n;
  for (auto _ : state) {
    cpu::gemm_s8s8_packed(s.m, s.n, s.k, ap.data(), b.data(), s.k, nullptr, 0, &ep);
    benchmark::DoNotOptimize(y.data());
  }
  set_int8_peak(state, s, threads);
  cpu::set_num_threads(0);
}

// The bf16 linear as the engine runs it where oneDNN is the bf16 GEMM (y = bf16(x W^T + b), bias and
// rounding inside oneDNN): W plain (oneDNN copies it into its blocked layout every call) or packed once
// (onednn_gemm.h: onednn_pack_bf16_weight). Shapes: wan-small's (M 1280: attention 1536^2, FFN
// 8960 x 1536 and 1536 x 8960; the patch embedding 1536 x 64) and FLUX-dev width's (M 1152 / 4608 x 3072 /
// 12288 x 3072; x_embedder 3072 x 64; M 256: the image tokens of a 256 x 256 image).
std::vector<Shape> linear_shapes() {
  return {{1280, 1536, 1536}, {1280, 8960, 1536}, {1280, 1536, 8960}, {1280, 1536, 64}, {1152, 3072, 3072},
          {1152, 12288, 3072}, {1152, 3072, 12288}, {1024, 3072, 64}, {256, 3072, 3072}, {256, 12288, 3072},
          {256, 3072, 12288}, {64, 3072, 3072}};
}

// Weights: plain, packed once (kPacked), or packed and cold (kCold) as a pipeline meets them (each layer's
// weight read once per pass, the model larger than the caches): copies of the packed weight filling
// ~768 MiB, one per iteration in turn, so each call reads its weight from memory.
template <bool kPacked, bool kCold = false>
void diffq_linear_bf16(benchmark::State& state, const Shape& s, int threads) {
  if (!cpu::onednn_bf16_packing_usable()) {
    state.SkipWithError("oneDNN reads no packed bf16 weights here");
    return;
  }
  cpu::set_num_threads(threads);
  cpu::Tuning tuning = cpu::current_tuning();
  tuning.gemm_kernel = cpu::GemmKernel::onednn;
  const cpu::ScopedTuning scope(tuning);
  // 64-byte aligned, as the engine's tensors are (core/memory.cpp): oneDNN's AMX brgemm reads packed
  // weights and A rows in place, and runs 1.5-2x slower on 16-byte aligned ones (std::vector's).
  const auto aligned = [](const std::vector<uint16_t>& v) {
    auto p = hwy::AllocateAligned<uint16_t>(std::max<size_t>(v.size(), 1));
    std::copy(v.begin(), v.end(), p.get());
    return p;
  };
  const auto x = aligned(random_bf16(size_t(s.m * s.k), 1)), w = aligned(random_bf16(size_t(s.n * s.k), 2));
  const auto bias = random_f32(size_t(s.n), 3);
  const size_t elems = kPacked ? size_t(cpu::onednn_packed_bf16_elems(s.n, s.k)) : 1;
  const size_t copies = kCold ? std::clamp<size_t>((size_t(768) << 20) / (elems * 2), 2, 256) : 1;
  std::vector<hwy::AlignedFreeUniquePtr<uint16_t[]>> wps;
  for (size_t i = 0; i < copies; ++i) {
    wps.push_back(hwy::AllocateAligned<uint16_t>(elems));
    if (kPacked) cpu::onednn_pack_bf16_weight(s.n, s.k, w.get(), s.k, wps.back().get());
  }
  const auto y = hwy::AllocateAligned<uint16_t>(size_t(s.m * s.n));
  size_t next = 0;
  for (auto _ : state) {
    const uint16_t* wp = wps[next].get();
    next = (next + 1) % copies;
    const bool ran = kPacked ? cpu::gemm_bf16_linear_packed(s.m, s.n, s.k, x.get(), s.k, wp, bias.data(), y.get(), s.n)
                             : cpu::gemm_bf16_linear_to_bf16(s.m, s.n, s.k, x.get(), s.k, w.get(), s.k, bias.data(), y.get(), s.n);
    if (!ran) {
      state.SkipWithError("oneDNN declined the shape");
      break;
    }
    benchmark::DoNotOptimize(y.get());
  }
  cpu::set_num_threads(0);
}

}  // namespace

int main(int argc, char** argv) {
  for (const int t : thread_counts())
    for (const Shape& s : linear_shapes()) {  // next to each other: a noisy machine hits both alike
      register_shape("diffq_linear_bf16_plain", s, t, diffq_linear_bf16<false>);
      register_shape("diffq_linear_bf16_packed", s, t, diffq_linear_bf16<true>);
      register_shape("diffq_linear_bf16_packed_cold", s, t, diffq_linear_bf16<true, true>);
    }
  register_kernel_vs<false>("kernel_vs_f32");
  register_kernel_vs<true>("kernel_vs_bf16");
  register_gemm("diffq_sgemm_f32", diffq_sgemm);
  register_gemm("diffq_gemm_bf16", diffq_gemm_bf16);
  register_gemm("diffq_gemm_bf16_flux_small", diffq_gemm_bf16, int8_shapes());
  register_gemm("diffq_gemm_s8s8s32", diffq_gemm_s8s8s32, int8_shapes());
  register_gemm("diffq_gemm_s8_packed_bf16out", diffq_gemm_s8_packed_bf16out, int8_shapes());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
