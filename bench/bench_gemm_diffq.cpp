// diffq's own GEMM entry points (src/backend/cpu/gemm.h) exactly as the engine calls them, with the
// diffq thread count set to the benchmark's. bf16 timings include whatever gemm_bf16 does internally.
#include "backend/cpu/gemm.h"
#include "backend/cpu/threads.h"
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

}  // namespace

int main(int argc, char** argv) {
  register_gemm("diffq_sgemm_f32", diffq_sgemm);
  register_gemm("diffq_gemm_bf16", diffq_gemm_bf16);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
