// Candidate: OpenBLAS (Debian libopenblas-dev, pthread variant). f32: cblas_sgemm. bf16: cblas_sbgemm
// (bf16 A/B, f32 accumulation and C) where the library exports it (HAVE_CBLAS_SBGEMM, checked by
// CMake: Debian's 0.3.21 is built without BUILD_BFLOAT16 and does not); "widen to f32 then
// cblas_sgemm" is what bench_gemm_diffq measures.
#include <cblas.h>

#include "gemm_bench_common.h"

using namespace gemm_bench;

namespace {

void openblas_sgemm(benchmark::State& state, const Shape& s, int threads) {
  openblas_set_num_threads(threads);
  const auto a = random_f32(size_t(s.m * s.k), 1), b = random_f32(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.m), int(s.n), int(s.k), 1.0f, a.data(),
                int(s.k), b.data(), int(s.k), 0.0f, c.data(), int(s.n));
    benchmark::DoNotOptimize(c.data());
  }
}

#ifdef HAVE_CBLAS_SBGEMM
void openblas_sbgemm(benchmark::State& state, const Shape& s, int threads) {
  openblas_set_num_threads(threads);
  const auto a = random_bf16(size_t(s.m * s.k), 1), b = random_bf16(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.m), int(s.n), int(s.k), 1.0f,
                 reinterpret_cast<const bfloat16*>(a.data()), int(s.k),
                 reinterpret_cast<const bfloat16*>(b.data()), int(s.k), 0.0f, c.data(), int(s.n));
    benchmark::DoNotOptimize(c.data());
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  register_gemm("openblas_sgemm_f32", openblas_sgemm);
#ifdef HAVE_CBLAS_SBGEMM
  register_gemm("openblas_sbgemm_bf16", openblas_sbgemm);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("openblas_corename", openblas_get_corename());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
