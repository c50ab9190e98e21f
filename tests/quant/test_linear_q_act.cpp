// linear_q with its activation fused (ops::linear_q_act, Linear::with_gelu_tanh: the FFNs' GELU applied by
// the linear's kernel while its output is in cache) against the two ops it replaces, bit for bit: the CPU's
// torchao int8dq kernel (oneDNN's int8 path and, in the @int8-tile run, diffq's tile; f32 / bf16 / f16
// inputs, row chunks and column tails, per-token and per-tensor scales, GELU in registers and other
// activations after the epilogue) and the packed bf16 kernel (several weight slices, 3-D and strided
// inputs); that the fused call is one op (the unary kernel never runs); that schemes whose kernel does not
// apply activations, traces and adapters get the two ops.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "common/random_tensor.h"
#include "core/random.h"
#include "diffq/error.h"
#include "modules/layers.h"
#include "ops/linear_q.h"
#include "ops/ops.h"
#include "ops/trace.h"
#include "quant/torchao/affine_int8_weight.h"

namespace {

using namespace diffq;
namespace cpu = diffq::backend::cpu;
namespace tao = diffq::quant::torchao;
using ops::UnaryFn;

struct ThreadsGuard {
  explicit ThreadsGuard(int n) { cpu::set_num_threads(n); }
  ~ThreadsGuard() { cpu::set_num_threads(0); }
};

// Counts the CPU kernel of op K's calls while alive (the real kernel still computes them).
template <ops::OpKind K>
struct KernelCounter {
  static inline int count = 0;
  static inline ops::KernelFn real = nullptr;
  static void counting(const ops::OpCall& c, Tensor& out) {
    ++count;
    real(c, out);
  }
  KernelCounter() {
    real = ops::find_kernel(K, DeviceKind::cpu);
    count = 0;
    ops::register_kernel(K, DeviceKind::cpu, counting);
  }
  ~KernelCounter() { ops::register_kernel(K, DeviceKind::cpu, real); }
  int calls() const { return count; }
};
using UnaryCounter = KernelCounter<ops::OpKind::unary>;

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), a.nbytes()) == 0;
}

std::shared_ptr<tao::AffineInt8Weight> int8dq_weight(int64_t n, int64_t k, DType dt, tao::Granularity::Type act,
                                                     Generator& g) {
  const Tensor w = ops::mul_scalar(randn_tensor({n, k}, g, DType::f32), 0.05).to(dt);
  tao::Granularity wg, ag;
  ag.type = act;
  return tao::AffineInt8Weight::quantize_int8(w, wg, ag);
}

// The kernels' in-place rows (row_kernels.h) against the unary op on the same values.
TEST(LinearQAct, RowsInPlaceEqualTheUnaryOp) {
  Generator g(3);
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (UnaryFn fn : {UnaryFn::gelu_tanh, UnaryFn::silu}) {
      const Tensor y = ops::mul_scalar(randn_tensor({5, 300}, g, DType::f32), 4.0).to(dt);
      Tensor got = y.clone();
      cpu::unary_rows_in_place(fn, dt, static_cast<uint8_t*>(got.data_ptr()) + 2 * dtype_size(dt), 300, 5, 250);
      Tensor want = y.clone();
      ops::copy_into(ops::unary(y.slice(1, 2, 252), fn), want.slice(1, 2, 252));
      EXPECT_TRUE(same_bytes(got, want)) << dtype_name(dt) << " fn=" << int(fn);
    }
}

TEST(LinearQAct, Int8dqEqualsTheLinearThenTheUnaryOp) {
  ThreadsGuard tg(2);
  Generator g(11);
  ASSERT_TRUE(ops::linear_q_applies_activation(DeviceKind::cpu, "torchao_int8dq"));
  // Rows past one oneDNN call (512) and a column tail past the last full vector; m = 1; a short K.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 50, 1030}, {1, 40, 515}, {600, 300, 64}})
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (auto act : {tao::Granularity::PerRow, tao::Granularity::PerTensor})
        for (bool with_bias : {false, true})
          for (UnaryFn fn : {UnaryFn::gelu_tanh, UnaryFn::silu}) {
            const auto qw = int8dq_weight(n, k, dt, act, g);
            // Wide activations: GELU's tails (tanh(u) = -1, large positive) are met too.
            const Tensor x = ops::mul_scalar(randn_tensor({1, m, k}, g, DType::f32), 4.0).to(dt);
            const Tensor b = with_bias ? randn_tensor({n}, g, DType::f32).to(dt) : Tensor();
            const Tensor want = ops::unary(ops::linear_q(x, *qw, b), fn);
            UnaryCounter counter;
            const Tensor got = ops::linear_q_act(x, *qw, b, fn);
            const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                     " " + std::string(dtype_name(dt)) + " per_tensor=" +
                                     std::to_string(act == tao::Granularity::PerTensor) + " bias=" +
                                     std::to_string(with_bias) + " fn=" + std::to_string(int(fn));
            EXPECT_TRUE(same_bytes(got, want)) << what;
            EXPECT_EQ(counter.calls(), 0) << what << ": the fused call ran the unary op";
          }
}

TEST(LinearQAct, PackedBf16EqualsTheLinearThenTheUnaryOp) {
  if (!cpu::onednn_bf16_packing_usable())
    GTEST_SKIP() << "needs oneDNN's native bf16 matmul on packed weights (AVX512-BF16 or AMX-BF16): "
                 << cpu::onednn_bf16_impl();
  ASSERT_TRUE(ops::linear_q_applies_activation(DeviceKind::cpu, cpu::kPackedBf16Scheme));
  cpu::Tuning t = cpu::current_tuning();
  t.gemm_kernel = cpu::GemmKernel::onednn;
  const cpu::ScopedTuning scope(t);
  uint32_t seed = 20;
  // K = 4096: 2048 columns per oneDNN call (16 MiB of packed weight), so N = 2100 is two slices.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{300, 2100, 4096}, {77, 130, 96}, {1, 64, 64}})
    for (int threads : {1, 2})
      for (bool with_bias : {false, true}) {
        ThreadsGuard tg(threads);
        const cpu::PackedBf16Weight w(diffq::testing::randn({n, k}, seed++, DType::bf16));
        const Tensor b = with_bias ? diffq::testing::randn({n}, seed++, DType::bf16) : Tensor();
        const Tensor x3 = ops::mul_scalar(diffq::testing::randn({2, m, k}, seed++, DType::f32), 3.0).to(DType::bf16);
        const Tensor strided = diffq::testing::randn({m, k + 8}, seed++, DType::bf16).slice(1, 0, k);
        for (const Tensor& x : {x3, strided}) {
          const Tensor want = ops::gelu(ops::linear_q(x, w, b), /*tanh_approx=*/true);
          UnaryCounter counter;
          const Tensor got = ops::linear_q_act(x, w, b, UnaryFn::gelu_tanh);
          const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                   " threads=" + std::to_string(threads) + " bias=" + std::to_string(with_bias) +
                                   " x " + x.str();
          EXPECT_TRUE(same_bytes(got, want)) << what;
          // (Rows oneDNN does not read in place, as the strided view, take the kernel's dense fallback: the
          // linear, then the unary op.)
          if (x.is_contiguous()) EXPECT_EQ(counter.calls(), 0) << what << ": the fused call ran the unary op";
        }
      }
}

TEST(LinearQAct, OtherSchemesAndTracesRunTheTwoOps) {
  Generator g(5);
  const auto qw = int8dq_weight(40, 64, DType::bf16, tao::Granularity::PerRow, g);
  const Tensor x = randn_tensor({3, 64}, g, DType::f32).to(DType::bf16);
  {
    // int8 weight-only: a scheme whose CPU kernel ("*": the tile linear plan) applies no activation.
    const Tensor w = ops::mul_scalar(randn_tensor({40, 64}, g, DType::f32), 0.05).to(DType::bf16);
    const auto wo = tao::AffineInt8Weight::quantize_int8(w, tao::Granularity{}, std::nullopt);
    ASSERT_FALSE(ops::linear_q_applies_activation(DeviceKind::cpu, wo->scheme())) << wo->scheme();
    UnaryCounter counter;
    const Tensor got = ops::linear_q_act(x, *wo, {}, UnaryFn::gelu_tanh);
    EXPECT_EQ(counter.calls(), 1) << wo->scheme() << ": the linear, then the unary op";
    EXPECT_TRUE(same_bytes(got, ops::gelu(wo->linear(x, {}), true)));
  }
  // While a trace records: linear_q without an activation, then the unary op.
  ops::Trace trace;
  const Tensor sx = trace.input(x.shape(), x.dtype());
  const ops::Graph graph = trace.finish({ops::linear_q_act(sx, *qw, {}, UnaryFn::gelu_tanh)});
  ASSERT_EQ(graph.nodes.size(), 2u);
  EXPECT_EQ(graph.nodes[0].call.kind, ops::OpKind::linear_q);
  EXPECT_FALSE(ops::linear_q_activation(graph.nodes[0].call).has_value());
  EXPECT_EQ(graph.nodes[1].call.kind, ops::OpKind::unary);
  EXPECT_EQ(ops::UnaryFn(graph.nodes[1].call.attrs.i0), UnaryFn::gelu_tanh);
  EXPECT_TRUE(same_bytes(graph.run({x})[0], ops::gelu(qw->linear(x, {}), true)));
}

// y = base(x) + 1: an adapter's term must come before the GELU.
struct PlusOne : LinearAdapter {
  Tensor apply(const Tensor&, const Tensor& y) override { return ops::add_scalar(y, 1.0); }
  std::string replay_key() const override { return "plus-one"; }
};

TEST(LinearQAct, LinearWithGeluTanhEqualsGeluOfTheLinear) {
  Generator g(7);
  const auto qw = int8dq_weight(48, 64, DType::bf16, tao::Granularity::PerRow, g);
  const Tensor b = randn_tensor({48}, g, DType::f32).to(DType::bf16);
  const Tensor x = randn_tensor({2, 5, 64}, g, DType::f32).to(DType::bf16);
  Linear lin(64, 48);
  lin.weight.set(qw, Residency::host);
  lin.bias.set(b, Residency::host);
  {
    UnaryCounter counter;
    EXPECT_TRUE(same_bytes(lin.with_gelu_tanh(x), ops::gelu(lin(x), true)));
  }
  lin.adapter = std::make_shared<PlusOne>();
  UnaryCounter counter;
  const Tensor got = lin.with_gelu_tanh(x);
  EXPECT_EQ(counter.calls(), 1) << "with an adapter: the linear (+ its term), then the unary op";
  EXPECT_TRUE(same_bytes(got, ops::gelu(ops::add_scalar(qw->linear(x, b), 1.0), true)));
}

}  // namespace

// The CPU copy / cast kernels' calls while alive (ops::copy_into runs them).
struct CopyCounter {
  KernelCounter<ops::OpKind::copy> copies;
  KernelCounter<ops::OpKind::cast> casts;
  int calls() const { return copies.calls() + casts.calls(); }
};

// ops::linear_q_into writes linear_q(_act)'s bits into columns of a wider buffer and leaves the other columns:
// the packed bf16 kernel in place (no copy; AMX tiles at 300 x 4096, oneDNN's parts forced and elsewhere), other
// schemes' results copied in (int8dq; int8 weight-only with an activation it does not apply); while a trace
// records it is an error.
TEST(LinearQInto, WritesTheLinearsBitsIntoColumnsOfABuffer) {
  Generator g(9);
  const auto check_into = [&](const ops::PackedWeight& w, const Tensor& x, const Tensor& b, std::optional<UnaryFn> act,
                              int want_copies /* -1: not checked */, const std::string& what) {
    const int64_t n = w.shape()[0], m = x.size(-2);
    Tensor buf = Tensor::full({2, m, n + 48}, 7.0, x.dtype());
    const Tensor x3 = ops::concat({x.unsqueeze(0), ops::mul_scalar(x, -0.5).unsqueeze(0)}, 0);  // [2, m, k]
    const Tensor want = act ? ops::linear_q_act(x3, w, b, *act) : ops::linear_q(x3, w, b);
    CopyCounter copies;
    ops::linear_q_into(x3, w, b, act, buf.slice(2, 16, 16 + n));
    if (want_copies >= 0) EXPECT_EQ(copies.calls(), want_copies) << what;
    EXPECT_TRUE(same_bytes(buf.slice(2, 16, 16 + n), want)) << what;
    const Tensor sentinel = Tensor::full({2, m, 16}, 7.0, x.dtype());
    EXPECT_TRUE(same_bytes(buf.slice(2, 0, 16), sentinel) && same_bytes(buf.slice(2, 16 + n, 32 + n), sentinel))
        << what << ": columns outside the view were written";
  };
  if (cpu::onednn_bf16_packing_usable()) {
    for (const bool onednn : {false, true}) {
      cpu::Tuning t = cpu::current_tuning();
      if (onednn) t.gemm_kernel = cpu::GemmKernel::onednn;
      const cpu::ScopedTuning scope(t);
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{300, 160, 4096}, {77, 130, 96}}) {
        const cpu::PackedBf16Weight w(ops::mul_scalar(randn_tensor({n, k}, g, DType::f32), 0.05).to(DType::bf16));
        const Tensor x = randn_tensor({m, k}, g, DType::f32).to(DType::bf16);
        const Tensor b = randn_tensor({n}, g, DType::f32).to(DType::bf16);
        for (const auto act : {std::optional<UnaryFn>(), std::optional<UnaryFn>(UnaryFn::gelu_tanh)})
          check_into(w, x, b, act, 0,
                     "packed bf16 " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                         (onednn ? " oneDNN" : "") + (act ? " gelu" : ""));
      }
    }
  }
  const auto qw = int8dq_weight(40, 64, DType::bf16, tao::Granularity::PerRow, g);
  const Tensor x = randn_tensor({3, 64}, g, DType::f32).to(DType::bf16);
  // (these kernels copy / cast internally too: their counts are not checked)
  check_into(*qw, x, {}, UnaryFn::gelu_tanh, -1, "int8dq (its own result, copied in)");
  const Tensor w = ops::mul_scalar(randn_tensor({40, 64}, g, DType::f32), 0.05).to(DType::bf16);
  const auto wo = tao::AffineInt8Weight::quantize_int8(w, tao::Granularity{}, std::nullopt);
  check_into(*wo, x, {}, UnaryFn::gelu_tanh, -1, "int8 weight-only with GELU (the two ops, copied in)");
  ops::Trace trace;
  const Tensor sx = trace.input(x.shape(), x.dtype());
  EXPECT_THROW(ops::linear_q_into(sx, *qw, {}, std::nullopt, Tensor::zeros({3, 40}, DType::bf16)), Error);
  (void)trace.finish({sx});
}
