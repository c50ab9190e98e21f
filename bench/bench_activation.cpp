// The activations of the FLUX / Wan MLPs as the engine runs them (ops::unary on a bf16 [1, M, N] row
// block, computed in f32 and rounded once): gelu_tanh (FLUX's and Wan's FFN), silu, on the shapes of
// the hidden layer after the MLP's first linear. Reported as elements per second; wall clock.
#include <benchmark/benchmark.h>

#include <string>

#include "backend/cpu/threads.h"
#include "core/random.h"
#include "ops/ops.h"

namespace cpu = diffq::backend::cpu;
using diffq::DType;
using diffq::Tensor;

namespace {

void activation(benchmark::State& state, diffq::ops::UnaryFn fn, int64_t m, int64_t n, int threads) {
  cpu::set_num_threads(threads);
  diffq::Generator g(0);
  const Tensor x = diffq::randn_tensor({1, m, n}, g, DType::f32).to(DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(diffq::ops::unary(x, fn));
  state.counters["Gelem/s"] = benchmark::Counter(double(m * n) * double(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
  cpu::set_num_threads(0);
}

}  // namespace

int main(int argc, char** argv) {
  struct Shape {
    const char* name;
    int64_t m, n;
  };
  const Shape shapes[] = {{"wan_ffn", 1280, 8960}, {"flux_mlp", 512, 12288}};
  const std::pair<const char*, diffq::ops::UnaryFn> fns[] = {{"gelu_tanh", diffq::ops::UnaryFn::gelu_tanh},
                                                             {"silu", diffq::ops::UnaryFn::silu}};
  for (const auto& [fname, fn] : fns)
    for (const auto& s : shapes)
      for (int threads : {1, 2}) {
        const std::string name = std::string(fname) + "/" + s.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), activation, fn, s.m, s.n, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
