// Shared by the bench_gemm_* programs: shapes, inputs, counters. Depends on no GEMM library, so that
// each library can live in its own executable (libblis and libopenblas both export cblas_*).
//
// Layout benchmarked: C[M,N] = A[M,K] @ B[N,K]^T, row-major — a linear layer (activations x weights
// stored [out, in]), which is how the engine calls GEMM. Every benchmark reports:
//   GFLOP/s  = 2*M*N*K / wall time (UseRealTime: the library's worker threads count).
// and the JSON's cpu_time is the whole process's CPU time (MeasureProcessCPUTime), from which
// tools/bench/gemm_table.py derives the contention-corrected figure 2*M*N*K / (cpu_time / threads).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gemm_bench {

struct Shape {
  int64_t m, n, k;
};

// FLUX/Wan linear layers on CPU, scaled to a sane runtime: 1152 tokens x hidden 768/3072,
// the VAE (4096 pixels x 512 channels) and a small-M (text tokens) case.
inline std::vector<Shape> shapes() {
  return {{1152, 768, 768}, {1152, 3072, 768}, {1152, 768, 3072}, {4096, 512, 512}, {64, 3072, 3072}};
}

// The int8 benchmarks' shapes: the FLUX-small linears at 512x512 (1024 image + 128 text tokens, width
// 768): joint M=1152, image-only M=1024, text-only M=128; N/K of 768, 2304 (qkv), 3072 (MLP), and the
// single blocks' fused 5376 x 768 and 768 x 3840.
inline std::vector<Shape> int8_shapes() {
  return {{1152, 768, 768},  {1152, 2304, 768}, {1152, 3072, 768},  {1152, 768, 3072}, {1024, 3072, 768},
          {1024, 768, 3072}, {128, 2304, 768},  {128, 3072, 768},   {1152, 5376, 768}, {1152, 768, 3840}};
}

// GEMM_BENCH_THREADS="1,2" (default) selects the thread counts.
inline std::vector<int> thread_counts() {
  std::vector<int> out;
  const char* env = std::getenv("GEMM_BENCH_THREADS");
  std::string s = env && *env ? env : "1,2";
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

inline std::vector<float> random_f32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// f32 -> bf16 bits, round to nearest even (inputs are finite).
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  const auto f = random_f32(n, seed);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = to_bf16(f[i]);
  return v;
}

inline void set_counters(benchmark::State& state, const Shape& s) {
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// fn(state, shape, threads) runs the timing loop; registered for every shape x thread count as
// <name>/M:../N:../K:../threads:..
using BenchFn = std::function<void(benchmark::State&, const Shape&, int)>;

// One benchmark `name` of shape s on t threads: body(state, s, t), then the shape's counters.
template <class Body>
void register_shape(const std::string& name, const Shape& s, int t, Body body) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [body, s, t](benchmark::State& st) {
                                 body(st, s, t);
                                 set_counters(st, s);
                               })
      ->ArgNames({"M", "N", "K", "threads"})
      ->Args({s.m, s.n, s.k, t})
      ->UseRealTime()
      ->MeasureProcessCPUTime()
      ->Unit(benchmark::kMillisecond);
}

inline void register_gemm(const std::string& name, BenchFn fn, const std::vector<Shape>& list = shapes()) {
  for (const int t : thread_counts())
    for (const Shape& s : list) register_shape(name, s, t, fn);
}

}  // namespace gemm_bench
