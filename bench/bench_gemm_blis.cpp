// Candidate: BLIS 0.9 (Debian libblis-dev, OpenMP variant), native typed API bli_sgemm. BLIS has no
// bf16 GEMM, so bf16 is "widen A and B to f32, then bli_sgemm" (the conversion is timed).
#include <blis.h>

#include <memory>

#include "gemm_bench_common.h"

using namespace gemm_bench;

namespace {

void blis_sgemm_nt(const Shape& s, float* a, float* b, float* c) {
  float one = 1.0f, zero = 0.0f;
  // Row-major A[M,K]: rs=K, cs=1. B stored [N,K] row-major, used transposed. C[M,N]: rs=N, cs=1.
  bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, s.m, s.n, s.k, &one, a, s.k, 1, b, s.k, 1, &zero, c, s.n,
            1);
}

void blis_sgemm(benchmark::State& state, const Shape& s, int threads) {
  bli_thread_set_num_threads(threads);
  auto a = random_f32(size_t(s.m * s.k), 1), b = random_f32(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    blis_sgemm_nt(s, a.data(), b.data(), c.data());
    benchmark::DoNotOptimize(c.data());
  }
}

void widen(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i]) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

void blis_widen_sgemm(benchmark::State& state, const Shape& s, int threads) {
  bli_thread_set_num_threads(threads);
  const auto a = random_bf16(size_t(s.m * s.k), 1), b = random_bf16(size_t(s.n * s.k), 2);
  std::unique_ptr<float[]> af(new float[a.size()]), bf(new float[b.size()]);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    widen(a.data(), af.get(), a.size());
    widen(b.data(), bf.get(), b.size());
    blis_sgemm_nt(s, af.get(), bf.get(), c.data());
    benchmark::DoNotOptimize(c.data());
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_gemm("blis_sgemm_f32", blis_sgemm);
  register_gemm("blis_widen_sgemm_bf16", blis_widen_sgemm);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blis_version", bli_info_get_version_str());
  benchmark::AddCustomContext("blis_arch", bli_arch_string(bli_arch_query_id()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
