// The fused GGUF linear (tile of dequantized rows -> f32 GEMM) against the dense f32 linear
// (ops::linear) on the same shape, and the row dequantizers alone (SIMD vs scalar reference).
//   build/bin/bench_quant_gguf --benchmark_filter=Linear
// Shape: M=1024 tokens, N=K=3072 (a FLUX attention projection), 2 threads unless --threads is given.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/quant/gguf_dequant.h"
#include "backend/cpu/threads.h"
#include "core/random.h"
#include "ops/ops.h"
#include "quant/gguf/gguf_weight.h"

using namespace diffq;
using diffq::quant::GGUFQuantizedWeight;
using diffq::quant::gguf::GGMLType;

namespace {

int g_threads = 2;
constexpr int64_t kM = 1024, kN = 3072, kK = 3072;

const Tensor& weight() {
  static const Tensor w = [] {
    Generator g(0);
    return randn_tensor({kN, kK}, g, DType::f32);
  }();
  return w;
}
const Tensor& input() {
  static const Tensor x = [] {
    Generator g(1);
    return randn_tensor({kM, kK}, g, DType::f32);
  }();
  return x;
}

void set_flops(benchmark::State& state) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kM * kN * kK * double(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

void BM_LinearDenseF32(benchmark::State& state) {
  backend::cpu::set_num_threads(g_threads);
  const Tensor& w = weight();
  const Tensor& x = input();
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, w).data_ptr());
  set_flops(state);
}

void BM_LinearGGUF(benchmark::State& state, GGMLType t) {
  backend::cpu::set_num_threads(g_threads);
  const auto q = GGUFQuantizedWeight::quantize(weight(), {t, DType::f32});
  const Tensor& x = input();
  for (auto _ : state) benchmark::DoNotOptimize(q->linear(x, {}).data_ptr());
  set_flops(state);
  state.counters["weight_MiB"] = double(q->nbytes()) / (1 << 20);
}

// Diffusers' way: dequantize the whole weight every call, then the dense linear.
void BM_LinearGGUFDequantFull(benchmark::State& state, GGMLType t) {
  backend::cpu::set_num_threads(g_threads);
  const auto q = GGUFQuantizedWeight::quantize(weight(), {t, DType::f32});
  const Tensor& x = input();
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, q->dequantize(DType::f32)).data_ptr());
  set_flops(state);
}

// Dequantize the whole [N, K] weight once, single thread: bytes of f32 written per second.
void BM_Dequant(benchmark::State& state, GGMLType t, bool simd) {
  const auto q = GGUFQuantizedWeight::quantize(weight(), {t, DType::f32});
  const auto dequantize = simd ? backend::cpu::gguf_dequantizer(t) : q->traits().dequantize_ref;
  std::vector<float> out(size_t(kN * kK));
  const auto* p = static_cast<const uint8_t*>(q->data().data_ptr());
  for (auto _ : state) {
    dequantize(p, out.data(), kN * kK);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kN * kK * 4);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) g_threads = std::stoi(argv[i] + 10);
  }
  benchmark::RegisterBenchmark("Linear/dense_f32", BM_LinearDenseF32)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (auto [name, t] : {std::pair{"q8_0", GGMLType::Q8_0}, {"q4_k", GGMLType::Q4_K}, {"q6_k", GGMLType::Q6_K},
                         {"q4_0", GGMLType::Q4_0}}) {
    benchmark::RegisterBenchmark((std::string("Linear/gguf_") + name).c_str(), BM_LinearGGUF, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("Linear/gguf_dequant_full_") + name).c_str(), BM_LinearGGUFDequantFull, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("Dequant/simd/") + name).c_str(), BM_Dequant, t, true)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("Dequant/scalar/") + name).c_str(), BM_Dequant, t, false)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
