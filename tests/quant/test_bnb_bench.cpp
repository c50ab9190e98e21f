// Timing of the fused NF4 linear against the dense bf16 linear (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*BnbBench*'). Prints milliseconds per call.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "backend/cpu/quant/dequant_rows.h"
#include "backend/cpu/threads.h"
#include "core/random.h"
#include "ops/ops.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_4bit_dequant.h"
#include "test_bnb_common.h"

namespace {

using diffq::DType;
using diffq::Tensor;
using diffq::quant::Bnb4bitOptions;
using diffq::quant::Bnb4bitWeight;
namespace bnb = diffq::quant::bnb;

template <class F>
double best_ms(int reps, const F& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

TEST(BnbBench, DISABLED_Nf4LinearVsDenseBf16) {
  const int64_t M = 1024, N = 3072, K = 3072;
  const int threads = 2;
  diffq::backend::cpu::set_num_threads(threads);
  diffq::Generator g(0);
  const Tensor w = diffq::randn_tensor({N, K}, g, DType::f32).to(DType::bf16);
  const Tensor x = diffq::randn_tensor({M, K}, g, DType::f32).to(DType::bf16);
  const Tensor b = diffq::randn_tensor({N}, g, DType::f32).to(DType::bf16);
  Bnb4bitOptions o;
  o.quant_type = bnb::QuantType::nf4;
  o.double_quant = true;
  o.sum_lanes = 8;
  const auto q = Bnb4bitWeight::quantize(w, o);

  Tensor y_dense, y_f32, y_bf16;
  const double dense = best_ms(3, [&] { y_dense = diffq::ops::linear(x, w, b); });
  q->set_compute_dtype(DType::f32);
  const double fused_f32 = best_ms(3, [&] { y_f32 = q->linear(x, b); });
  q->set_compute_dtype(DType::bf16);
  const double fused_bf16 = best_ms(3, [&] { y_bf16 = q->linear(x, b); });

  // Row dequantizer alone: SIMD vs scalar, whole weight.
  std::vector<float> rows(static_cast<size_t>(N * K));
  const double deq_simd =
      best_ms(3, [&] { diffq::backend::cpu::bnb_4bit_dequant_rows(*q, 0, N, rows.data(), DType::f32); });
  const auto am = q->absmax_f32();
  std::array<float, 512> pairs{};
  bnb::build_pair_table(q->code(), pairs.data());
  const double deq_scalar = best_ms(3, [&] {
    bnb::dequant_4bit_range_scalar(static_cast<const uint8_t*>(q->packed().data_ptr()), (N * K + 1) / 2, pairs.data(),
                                   am.data(), 0, 64, 0, N * K, rows.data());
  });

  const double gflop = 2.0 * M * N * K * 1e-9;
  std::printf("M=%lld N=%lld K=%lld, %d threads (bias, bf16 x)\n", (long long)M, (long long)N, (long long)K, threads);
  std::printf("  ops::linear bf16 dense      %8.1f ms  (%.1f GFLOP/s)\n", dense, gflop / dense * 1e3);
  std::printf("  bnb nf4 fused, compute f32  %8.1f ms  (%.1f GFLOP/s)\n", fused_f32, gflop / fused_f32 * 1e3);
  std::printf("  bnb nf4 fused, compute bf16 %8.1f ms  (%.1f GFLOP/s)\n", fused_bf16, gflop / fused_bf16 * 1e3);
  std::printf("  nf4 dequant of the weight (1 thread): SIMD %.2f ms, scalar %.2f ms\n", deq_simd, deq_scalar);
  std::printf("  max rel diff fused(bf16 compute) vs dense bf16 weights (nf4 quantization error): %.3g\n", bnbtest::max_rel(y_bf16, y_dense));
  diffq::backend::cpu::set_num_threads(0);
}

}  // namespace
