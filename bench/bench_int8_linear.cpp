// The whole torchao dynamic int8 linear (int8dq: per-token activation quantization, int8 GEMM, scale /
// bias / bf16 cast) against the dense bf16 linear the engine runs otherwise (ops::linear with bf16
// activations and weights), on the FLUX-small and wan-small linear shapes. Both take a
// bf16 x [M, K], a bf16 bias and give bf16 y [M, N]; the int8 weight is quantized once beforehand.
// Timings are wall clock (UseRealTime); the JSON's cpu_time is the process's CPU time.
#include <benchmark/benchmark.h>

#include "backend/cpu/threads.h"
#include "core/random.h"
#include "gemm_bench_common.h"
#include "ops/ops.h"
#include "quant/torchao/affine_int8_weight.h"

using namespace gemm_bench;
namespace cpu = diffq::backend::cpu;
namespace tao = diffq::quant::torchao;
using diffq::DType;
using diffq::Tensor;

namespace {

struct Inputs {
  Tensor x, w, b;
};

Inputs make_inputs(const Shape& s) {
  diffq::Generator g(0);
  Inputs in;
  in.w = diffq::ops::mul_scalar(diffq::randn_tensor({s.n, s.k}, g, DType::f32), 0.02).to(DType::bf16);
  in.x = diffq::randn_tensor({1, s.m, s.k}, g, DType::f32).to(DType::bf16);
  in.b = diffq::ops::mul_scalar(diffq::randn_tensor({s.n}, g, DType::f32), 0.1).to(DType::bf16);
  return in;
}

void linear_bf16(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const Inputs in = make_inputs(s);
  for (auto _ : state) benchmark::DoNotOptimize(diffq::ops::linear(in.x, in.w, in.b));
  cpu::set_num_threads(0);
}

void linear_int8dq(benchmark::State& state, const Shape& s, int threads) {
  cpu::set_num_threads(threads);
  const Inputs in = make_inputs(s);
  tao::Granularity row;
  row.type = tao::Granularity::PerRow;
  const auto q = tao::AffineInt8Weight::quantize_int8(in.w, row, row);
  for (auto _ : state) benchmark::DoNotOptimize(q->linear(in.x, in.b));
  cpu::set_num_threads(0);
}

// wan-small's linears (M 1280 video tokens: attention 1536^2, FFN 8960 x 1536 and 1536 x 8960; M 512:
// the cross-attention's text keys and values).
std::vector<Shape> wan_shapes() { return {{1280, 1536, 1536}, {1280, 8960, 1536}, {1280, 1536, 8960}, {512, 1536, 1536}}; }

}  // namespace

int main(int argc, char** argv) {
  register_gemm("linear_bf16", linear_bf16, int8_shapes());
  register_gemm("linear_int8dq", linear_int8dq, int8_shapes());
  register_gemm("wan_linear_bf16", linear_bf16, wan_shapes());
  register_gemm("wan_linear_int8dq", linear_int8dq, wan_shapes());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
