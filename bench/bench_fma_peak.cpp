// The machine's FP32 ceiling, measured: every thread runs a loop of 12 independent 256-bit FMAs
// (vfmadd231ps ymm: 8 lanes x 2 FLOP = 16 FLOP each). 12 chains cover FMA latency x 2 FMA pipes
// (Zen 3: 4 cycles x 2), so the loop runs at the core's FMA throughput. Reported:
//   GFLOP/s      total over the threads (the GEMM ceiling: "% of peak" divides by this)
//   GHz_implied  GFLOP/s / (32 FLOP/cycle/core x threads) — the clock the FMA units actually ran at
//                under load (2 FMA/cycle x 16 FLOP), rather than /proc/cpuinfo's nominal figure.
// On a shared machine the wall-clock figures drop when other processes take the cores; the JSON's
// cpu_time (whole process, MeasureProcessCPUTime) does not, so tools/bench/gemm_table.py takes the
// clock from 12*16*kLoops*threads FLOP / (cpu_time / threads): the clock while the loop was running.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "fma_loop.h"
#include "int8_madd_loop.h"

namespace {

using fma_bench::fma_loop;

constexpr int64_t kLoops = 20'000'000;  // x 12 FMA x 16 FLOP = 3.84 GFLOP per thread per iteration

void BM_fma_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(fma_loop, kLoops);
    fma_loop(kLoops);
    for (auto& th : pool) th.join();
  }
  const double flop = double(kLoops) * fma_bench::kFlopPerLoop * threads;
  state.counters["flop_per_iter"] = flop;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GHz_implied"] =
      benchmark::Counter(flop * 1e-9 / (32.0 * threads), benchmark::Counter::kIsIterationInvariantRate);
}

// The exact int8 GEMM's ceiling on this core (int8_madd_loop.h), as int8 multiply-adds per second and
// as "GFLOP-equivalent" (2 per multiply-add, the unit the int8 GEMM benchmarks report): compare with
// BM_fma_peak's GFLOP/s to see how much faster than f32 an int8 GEMM can possibly be here.
void BM_int8_madd_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(int8_bench::madd_add_loop, kLoops);
    int8_bench::madd_add_loop(kLoops);
    for (auto& th : pool) th.join();
  }
  const double macs = double(kLoops) * int8_bench::kMacsPerLoop * threads;
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP-eq/s"] =
      benchmark::Counter(2 * macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// 1 and 2 threads, wall time, whole-process CPU time.
void peak_args(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_int8_madd_peak)->Apply(peak_args);
BENCHMARK(BM_fma_peak)->Apply(peak_args);
BENCHMARK_MAIN();
