// GEMM epilogue fusion (src/compile/fuse_epilogue.cpp): the part-by-part GEMM entry points give the
// plain ones' bits, the fused kernel with a GEMM prologue matches its scalar reference, and on FLUX's
// tiny transformer the pattern is matched (bias + GELU, gate * x + residual) with results bit-identical
// to the unfused compiled graph and within 1e-5 of eager.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/cpu/compile/fused_kernel.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "compile/capture.h"
#include "compile/compiled_module.h"
#include "compile/fused_reference.h"
#include "compile/passes.h"
#include "common/uniform_vec.h"
#include "compile_test_util.h"
#include "flux_pass_ab.h"
#include "io/safetensors.h"
#include "models/flux/flux_transformer.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using compile_test::same_bits;
using diffq::testing::uniform_vec;

// Inputs uniform in [-1, 1).
Tensor randn(const Shape& s, uint64_t seed, DType dt = DType::f32) { return compile_test::randn(s, seed, dt, 1.f); }
namespace cpu = diffq::backend::cpu;

namespace {

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
};

// Runs one case through the plain entry point and through the part-by-part one (parts written into C
// itself, or into a scratch tile copied back in `end`), and checks the bits and that the parts tile C.
void check_parts(const GemmCase& cs, bool bf16, float beta, bool scratch) {
  const int64_t lda = (cs.ta ? cs.m : cs.k) + 2, ldb = (cs.tb ? cs.k : cs.n) + 1, ldc = cs.n + 3;
  const int64_t a_rows = cs.ta ? cs.k : cs.m, b_rows = cs.tb ? cs.n : cs.k;
  const auto a = uniform_vec(size_t(a_rows * lda), 1), b = uniform_vec(size_t(b_rows * ldb), 2);
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = f32_to_bf16(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bh[i] = f32_to_bf16(b[i]);
  const auto c0 = uniform_vec(size_t(cs.m * ldc), 3);
  auto want = c0, got = c0;
  std::vector<int> covered(size_t(cs.m * cs.n), 0);
  if (bf16)
    cpu::gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, 0.75f, ah.data(), lda, bh.data(), ldb, beta, want.data(), ldc);
  else
    cpu::sgemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, 0.75f, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
  cpu::GemmParts parts;
  parts.begin = [&](int64_t r0, int64_t r1, int64_t c0_, int64_t c1, int64_t* ld) -> float* {
    if (!scratch) {
      *ld = ldc;
      return got.data() + r0 * ldc + c0_;
    }
    thread_local std::vector<float> tile;
    tile.assign(size_t((r1 - r0) * (c1 - c0_)), 0.f);
    *ld = c1 - c0_;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0_; c < c1; ++c) tile[size_t((r - r0) * *ld + c - c0_)] = got[size_t(r * ldc + c)];
    return tile.data();
  };
  parts.end = [&](int64_t r0, int64_t r1, int64_t c0_, int64_t c1, const float* p, int64_t ld) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0_; c < c1; ++c) {
        got[size_t(r * ldc + c)] = p[(r - r0) * ld + c - c0_];
        ++covered[size_t(r * cs.n + c)];
      }
  };
  if (bf16)
    cpu::gemm_bf16_parts(cs.ta, cs.tb, cs.m, cs.n, cs.k, 0.75f, ah.data(), lda, bh.data(), ldb, beta, parts);
  else
    cpu::sgemm_parts(cs.ta, cs.tb, cs.m, cs.n, cs.k, 0.75f, a.data(), lda, b.data(), ldb, beta, parts);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
      << cs.m << "x" << cs.n << "x" << cs.k << (bf16 ? " bf16" : " f32") << " threads " << cpu::num_threads();
  for (int c : covered) ASSERT_EQ(c, 1) << "every element of C in exactly one part";
}

}  // namespace

TEST(GemmParts, BitIdenticalToThePlainGemm) {
  const std::vector<GemmCase> cases = {{false, true, 1, 5, 7},     {false, true, 33, 70, 19},
                                       {false, true, 200, 130, 64}, {true, false, 64, 1000, 40},
                                       {false, false, 700, 48, 96}, {true, true, 96, 96, 96}};
  for (int threads : {1, 2, 3}) {
    cpu::set_num_threads(threads);
    for (cpu::GemmSplit split : {cpu::GemmSplit::longer_side, cpu::GemmSplit::rows, cpu::GemmSplit::cols}) {
      cpu::Tuning t;
      t.gemm_split = split;
      t.gemm_parts_per_thread = split == cpu::GemmSplit::rows ? 2 : 1;
      cpu::ScopedTuning scope(t);
      for (const GemmCase& cs : cases)
        for (bool bf16 : {false, true}) {
          check_parts(cs, bf16, 0.f, false);
          check_parts(cs, bf16, 1.f, true);
        }
    }
  }
  // gemm_bf16 in several widened blocks (k large enough that a block holds 64 rows).
  cpu::set_num_threads(2);
  check_parts({false, true, 150, 40, 70000}, true, 1.f, true);
  cpu::set_num_threads(0);
}

TEST(FuseEpilogue, KernelMatchesScalarReference) {
  // residual + gate * gelu_tanh(linear(x)), gate broadcast over rows; leaves: 0 the GEMM part,
  // 1 gate, 2 residual, 3 x, 4 w, 5 bias.
  FusedProgram p;
  auto add = [&](Instr i) {
    p.code.push_back(i);
    return int32_t(p.code.size() - 1);
  };
  const int32_t l0 = add({Instr::Op::load, 0}), l1 = add({Instr::Op::load, 1}), l2 = add({Instr::Op::load, 2});
  const int32_t g = add({Instr::Op::unary, l0, -1, int64_t(ops::UnaryFn::gelu_tanh)});
  const int32_t m = add({Instr::Op::binary, l1, g, int64_t(ops::BinaryFn::mul)});
  add({Instr::Op::binary, l2, m, int64_t(ops::BinaryFn::add)});
  for (DType dt : {DType::f32, DType::bf16})
    for (bool with_bias : {true, false}) {
      FusedProgram q = p;
      GemmPrologue gp;
      gp.leaf = 0, gp.x = 3, gp.w = 4, gp.b = with_bias ? 5 : -1, gp.dtype = dt;
      q.gemm = gp;
      const Tensor x = randn({2, 37, 96}, 1, dt), w = randn({600, 96}, 2, dt), bias = randn({600}, 3, dt);
      const Tensor gate = randn({2, 1, 600}, 4, dt), res = randn({2, 37, 600}, 5, dt);
      const std::vector<Tensor> leaves = {Tensor(), gate, res, x, w, bias};
      Tensor ref = Tensor::empty({2, 37, 600}, dt);
      run_fused_reference(q, leaves, ref);
      for (int threads : {1, 2, 3}) {
        cpu::set_num_threads(threads);
        Tensor fast = Tensor::empty({2, 37, 600}, dt);
        backend::cpu::run_fused(q, leaves, fast);
        EXPECT_LE(max_rel(fast, ref), dt == DType::f32 ? 2e-6 : 8e-3) << dtype_name(dt) << " threads " << threads;
      }
    }
  cpu::set_num_threads(0);
}

namespace {

// A FLUX-like MLP residual: x + gate * fc2(gelu_tanh(fc1(x))), and a lone linear -> add.
struct Mlp : Module {
  Mlp() : Module("Mlp"), fc1(48, 200), fc2(200, 48) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x, const Tensor& gate) {
    return ops::add(x, ops::mul(gate, fc2(ops::gelu(fc1(x), true))));
  }
  Linear fc1, fc2;
};

ForwardFn mlp_fn() {
  return [](Module& m, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<Mlp&>(m).forward(in[0], in[1])};
  };
}

}  // namespace

// Dense linears: the bf16 weights are kept dense (not packed for oneDNN; that case is the next test).
cpu::Tuning packing(cpu::WeightPacking p) {
  cpu::Tuning t = cpu::current_tuning();
  t.weight_packing = p;
  return t;
}

TEST(FuseEpilogue, MlpMatchedBitIdenticalToUnfusedAndEqualsEager) {
  const cpu::ScopedTuning dense(packing(cpu::WeightPacking::off));
  for (DType dt : {DType::f32, DType::bf16}) {
    Mlp mlp;
    init_parameters_randn(mlp, dt, 3, 0.2);
    const Tensor x = randn({2, 70, 48}, 7, dt), gate = randn({2, 1, 48}, 8, dt);
    const Tensor eager = mlp.forward(x, gate);
    CompileOptions on, off;
    on.fullgraph = off.fullgraph = true;
    off.fuse_epilogue = false;
    CompiledModule con(mlp_fn(), on), coff(mlp_fn(), off);
    for (int threads : {1, 2, 3}) {
      cpu::set_num_threads(threads);
      const Tensor y_on = con.run(mlp, {x, gate})[0], y_off = coff.run(mlp, {x, gate})[0];
      EXPECT_TRUE(same_bits(y_on, y_off)) << dtype_name(dt) << " threads " << threads;
      EXPECT_LE(max_rel(y_on, mlp.forward(x, gate)), dt == DType::f32 ? 1e-5 : 0.0) << dtype_name(dt);
    }
    cpu::set_num_threads(0);
    const auto g = con.graph_for(mlp, {x, gate});
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->stats.fused_epilogues, 2) << g->graph.dump();
    EXPECT_EQ(g->graph.nodes.size(), 2u) << g->graph.dump();  // gelu(fc1), x + gate * fc2
    const auto g_off = coff.graph_for(mlp, {x, gate});
    EXPECT_EQ(g_off->stats.fused_epilogues, 0);
    EXPECT_LT(g->plan.unplanned_bytes, g_off->plan.unplanned_bytes);  // no buffer for the linears' outputs
    (void)eager;
  }
}

// bf16 weights packed for oneDNN at capture (ops/weight_packing.h): the linears become GEMM prologues
// computed from the packed weight part by part, bit-identical to the unfused graph and to eager (which
// computes from the packed weight too); a second module of the same shapes running the same graph gets
// its weights packed at its first run; a weight read densely since (unpacked for good) is computed dense
// by the same graph.
TEST(FuseEpilogue, PackedWeightsMlpBitIdenticalToUnfusedAndEager) {
  if (!cpu::onednn_bf16_packing_usable()) GTEST_SKIP() << "oneDNN reads no packed bf16 weights here: " << cpu::onednn_bf16_impl();
  const cpu::ScopedTuning packed(packing(cpu::WeightPacking::on));
  Mlp mlp, other;
  init_parameters_randn(mlp, DType::bf16, 3, 0.2);
  init_parameters_randn(other, DType::bf16, 4, 0.2);
  const Tensor x = randn({2, 70, 48}, 7, DType::bf16), gate = randn({2, 1, 48}, 8, DType::bf16);
  CompileOptions on, off;
  on.fullgraph = off.fullgraph = true;
  off.fuse_epilogue = false;
  CompiledModule con(mlp_fn(), on), coff(mlp_fn(), off);
  for (int threads : {1, 2, 3}) {
    cpu::set_num_threads(threads);
    const Tensor y_on = con.run(mlp, {x, gate})[0], y_off = coff.run(mlp, {x, gate})[0];
    EXPECT_TRUE(mlp.fc1.weight.is_packed() && mlp.fc2.weight.is_packed());
    EXPECT_TRUE(same_bits(y_on, y_off)) << "threads " << threads;
    EXPECT_TRUE(same_bits(y_on, mlp.forward(x, gate))) << "threads " << threads;  // eager, packed weights
  }
  cpu::set_num_threads(0);
  const auto g = con.graph_for(mlp, {x, gate});
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->stats.fused_epilogues, 2) << g->graph.dump();
  EXPECT_EQ(g->graph.nodes.size(), 2u) << g->graph.dump();

  EXPECT_FALSE(other.fc1.weight.is_packed());
  const Tensor y_other = con.run(other, {x, gate})[0];
  EXPECT_TRUE(other.fc1.weight.is_packed() && other.fc2.weight.is_packed());
  EXPECT_EQ(con.stats().captures, 1) << "the second module's packed weights must hit the same graph";
  EXPECT_TRUE(same_bits(y_other, other.forward(x, gate)));

  (void)other.fc1.weight.dense();  // unpacked for good
  ASSERT_FALSE(other.fc1.weight.is_packed());
  const Tensor y_dense = con.run(other, {x, gate})[0];
  const Tensor want = other.forward(x, gate);  // eager: fc1 dense, fc2 packed
  if (!cpu::onednn_bf16_uses_amx()) {  // the same sums on AVX512-BF16 (AMX: jit vs brgemm order may differ)
    EXPECT_TRUE(same_bits(y_dense, want));
  }
  EXPECT_LE(max_rel(y_dense, want), 0.02);
}

TEST(FuseEpilogue, FluxTransformerMatchedAndBitIdenticalToUnfused) {
  auto [model, eager, y_off, y_on, diffusers_out, s_off, s_on] =
      compile_test::flux_pass_ab([](CompileOptions& o) { o.fuse_epilogue = false; });
  EXPECT_TRUE(same_bits(y_on, y_off));
  EXPECT_LE(max_rel(y_on, eager), 1e-5);
  EXPECT_EQ(s_off.fused_epilogues, 0);
  // Per joint block: ff and ff_context (bias + GELU, gate * x + residual) and to_out / to_add_out
  // (gate * x + residual); per single block: proj_mlp (bias + GELU) and proj_out (gate * x + residual).
  EXPECT_GE(s_on.fused_epilogues, 8) << "epilogues";
  EXPECT_EQ(s_on.final_nodes, s_off.final_nodes - s_on.fused_epilogues);
  std::printf("[flux full] %lld linears run as GEMM prologues; %lld -> %lld nodes\n",
              (long long)s_on.fused_epilogues, (long long)s_off.final_nodes, (long long)s_on.final_nodes);
  model->uncompile();
}
