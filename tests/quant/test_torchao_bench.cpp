// Timing of the torchao linears against the dense ops::linear at a FLUX-sized shape (M=1024, N=K=3072,
// 2 threads). A measurement, not a check: DISABLED_ by default; run with
//   ./build-*/bin/test_quant --gtest_also_run_disabled_tests --gtest_filter='*TorchaoBench*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/quant/int8_dynamic_linear.h"
#include "backend/cpu/threads.h"
#include "core/random.h"
#include "ops/ops.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;

double best_ms(const std::function<void()>& f, int reps = 3) {
  f();  // warm up (packing buffers, thread pool)
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(TorchaoBench, DISABLED_LinearM1024N3072K3072TwoThreads) {
  backend::cpu::set_num_threads(2);
  const int64_t M = 1024, N = 3072, K = 3072;
  Generator g(0);
  const Tensor w = ops::mul_scalar(randn_tensor({N, K}, g, DType::f32), 0.02).to(DType::bf16);
  const Tensor x = randn_tensor({1, M, K}, g, DType::f32).to(DType::bf16);
  const Tensor b = ops::mul_scalar(randn_tensor({N}, g, DType::f32), 0.1).to(DType::bf16);
  const Tensor wf = w.to(DType::f32), xf = x.to(DType::f32), bf = b.to(DType::f32);
  const double gflop = 2.0 * M * N * K / 1e9;
  auto report = [&](const char* what, double ms, double ref) {
    std::printf("%-34s %8.1f ms  %6.1f GFLOP/s  %.2fx vs bf16 ops::linear\n", what, ms, gflop / ms * 1e3, ref / ms);
  };
  const double t_bf16 = best_ms([&] { ops::linear(x, w, b); });
  report("ops::linear bf16", t_bf16, t_bf16);
  report("ops::linear f32", best_ms([&] { ops::linear(xf, wf, bf); }), t_bf16);
  {
    std::vector<int8_t> a(size_t(M * K), 3), bq(size_t(N * K), -5);
    std::vector<int32_t> c(size_t(M * N));
    report("int8 GEMM alone (gemm_s8s8s32)", best_ms([&] {
             backend::cpu::gemm_s8s8s32(M, N, K, a.data(), K, bq.data(), K, c.data(), N);
           }), t_bf16);
  }
  {
    const Tensor xc = x.to(DType::f32).contiguous();
    std::vector<int8_t> q(size_t(M * K));
    std::vector<float> sc;
    report("int8 activation quantization", best_ms([&] {
             backend::cpu::quantize_activations_int8(xc.data<float>(), M, K, DType::bf16, false, q.data(), sc);
           }), t_bf16);
  }
  struct Case {
    const char* name;
    const char* cfg;
  };
  for (const Case c : {Case{"torchao int8dq (bf16 x)", R"({"quant_type": "int8dq"})"},
                       Case{"torchao int8wo (bf16 x)", R"({"quant_type": "int8wo"})"},
                       Case{"torchao int4wo g128 (bf16 x)", R"({"quant_type": "int4wo"})"},
                       Case{"torchao float8wo (bf16 x)", R"({"quant_type": "float8wo"})"}}) {
    auto q = tao::quantize(w, tao::Config::from_json(nlohmann::json::parse(c.cfg)));
    report(c.name, best_ms([&] { q->linear(x, b); }), t_bf16);
  }
  backend::cpu::set_num_threads(0);
}

}  // namespace
