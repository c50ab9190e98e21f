// The whole torchao dynamic int8 linear (int8dq: per-token activation quantization, int8 GEMM, scale /
// bias / bf16 cast) against the dense bf16 linear the engine runs otherwise (ops::linear with bf16
// activations and weights), on the FLUX-small and wan-small linear shapes. Both take a
// bf16 x [M, K], a bf16 bias and give bf16 y [M, N]; the int8 weight is quantized once beforehand
// (*_bf16_packed: the bf16 weight packed once, ops::linear_q, as the pipelines' linears on AMX).
// Timings are wall clock (UseRealTime); the JSON's cpu_time is the process's CPU time.
// ffn_up_gelu_*: the FFNs' first linear and GELU(tanh) as two ops (the linear, then the unary op) and fused
// (ops::linear_q_act: the activation applied by the linear's kernel to its output in cache), for int8dq and
// for the packed bf16 weight (skipped where oneDNN reads no packed weights); the same bits either way.
#include <benchmark/benchmark.h>

#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/threads.h"
#include "core/random.h"
#include "gemm_bench_common.h"
#include "ops/linear_q.h"
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

// The bf16 linear on the weight packed once (what the pipelines run on AMX / AVX512-BF16 CPUs); skipped where
// oneDNN reads no packed weights.
void linear_bf16_packed(benchmark::State& state, const Shape& s, int threads) {
  if (!cpu::onednn_bf16_packing_usable()) {
    state.SkipWithError("oneDNN reads no packed bf16 weights here");
    return;
  }
  cpu::set_num_threads(threads);
  const Inputs in = make_inputs(s);
  const cpu::PackedBf16Weight w(in.w);
  for (auto _ : state) benchmark::DoNotOptimize(diffq::ops::linear_q(in.x, w, in.b));
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

// The FFN's up projection + GELU(tanh): two ops, or one (kFused).
template <bool kFused>
void ffn_up_gelu(benchmark::State& state, int threads, const diffq::ops::PackedWeight& w, const Tensor& x,
                 const Tensor& b) {
  cpu::set_num_threads(threads);
  for (auto _ : state) {
    if (kFused)
      benchmark::DoNotOptimize(diffq::ops::linear_q_act(x, w, b, diffq::ops::UnaryFn::gelu_tanh));
    else
      benchmark::DoNotOptimize(diffq::ops::gelu(diffq::ops::linear_q(x, w, b), /*tanh_approx=*/true));
  }
  cpu::set_num_threads(0);
}
template <bool kFused>
void ffn_up_gelu_int8dq(benchmark::State& state, const Shape& s, int threads) {
  const Inputs in = make_inputs(s);
  tao::Granularity row;
  row.type = tao::Granularity::PerRow;
  ffn_up_gelu<kFused>(state, threads, *tao::AffineInt8Weight::quantize_int8(in.w, row, row), in.x, in.b);
}
template <bool kFused>
void ffn_up_gelu_bf16(benchmark::State& state, const Shape& s, int threads) {
  if (!cpu::onednn_bf16_packing_usable()) {
    state.SkipWithError("oneDNN reads no packed bf16 weights here");
    return;
  }
  const Inputs in = make_inputs(s);
  ffn_up_gelu<kFused>(state, threads, cpu::PackedBf16Weight(in.w), in.x, in.b);
}
// The FFNs' up projections: wan-small (1280 video tokens, 1536 -> 8960), FLUX's width at 256 x 256
// (1152 tokens, 3072 -> 12288).
std::vector<Shape> ffn_up_shapes() { return {{1280, 8960, 1536}, {1152, 12288, 3072}}; }

// wan-small's linears (M 1280 video tokens: attention 1536^2, FFN 8960 x 1536 and 1536 x 8960; M 512:
// the cross-attention's text keys and values).
std::vector<Shape> wan_shapes() { return {{1280, 1536, 1536}, {1280, 8960, 1536}, {1280, 1536, 8960}, {512, 1536, 1536}}; }
// FLUX.1's widths at 256 x 256 (builtin:flux-dev-width: 256 image and 256 text tokens): the double block's
// q / k / v, out and FFN linears on one stream's 256 rows, the single block's q / k / v, MLP and output
// projection on 512.
std::vector<Shape> flux_width_shapes() {
  return {{256, 3072, 3072},  {256, 12288, 3072}, {256, 3072, 12288},
          {512, 3072, 3072}, {512, 12288, 3072}, {512, 3072, 15360}};
}

}  // namespace

int main(int argc, char** argv) {
  register_gemm("linear_bf16", linear_bf16, int8_shapes());
  register_gemm("linear_int8dq", linear_int8dq, int8_shapes());
  register_gemm("wan_linear_bf16", linear_bf16, wan_shapes());
  register_gemm("linear_bf16_packed", linear_bf16_packed, int8_shapes());
  register_gemm("wan_linear_bf16_packed", linear_bf16_packed, wan_shapes());
  register_gemm("wan_linear_int8dq", linear_int8dq, wan_shapes());
  register_gemm("fluxw_linear_bf16_packed", linear_bf16_packed, flux_width_shapes());
  for (const int t : thread_counts())
    for (const Shape& s : ffn_up_shapes()) {  // each pair next to each other: a noisy host hits both alike
      register_shape("ffn_up_gelu_int8dq_two_ops", s, t, ffn_up_gelu_int8dq<false>);
      register_shape("ffn_up_gelu_int8dq_fused", s, t, ffn_up_gelu_int8dq<true>);
      register_shape("ffn_up_gelu_bf16_two_ops", s, t, ffn_up_gelu_bf16<false>);
      register_shape("ffn_up_gelu_bf16_fused", s, t, ffn_up_gelu_bf16<true>);
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
