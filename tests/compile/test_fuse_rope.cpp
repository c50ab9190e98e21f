// RMSNorm + RoPE fusion (src/compile/fuse_rope.cpp): the norm_rope kernel against its scalar reference,
// a toy q/k path (single: rope(norm(q)); joint: rope(concat(norm(a), norm(b)))) bit-identical to eager
// in f32 and bf16, and the tiny FLUX transformer matched (q and k of every block) with results
// bit-identical to the unfused compiled graph and within 1e-5 of eager.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "backend/cpu/compile/fused_kernel.h"
#include "backend/cpu/threads.h"
#include "compile/compiled_module.h"
#include "compile/fused_reference.h"
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
using compile_test::randn;
using compile_test::same_bits;

namespace {

}  // namespace

TEST(FuseRope, KernelMatchesScalarReference) {
  // Two segments (3 and 5 sequence positions), the first read through a transposed view, the second
  // without a weight. Leaves: cos, sin, x0, w0, x1.
  NormRope p;
  p.cos = 0, p.sin = 1;
  p.segments.push_back({0, 3, 2, 3, 1e-6});
  p.segments.push_back({3, 5, 4, -1, 1e-5});
  for (DType dt : {DType::f32, DType::bf16}) {
    p.norm_dtype = dt;
    const int64_t B = 2, H = 3, D = 24, S = 8;
    const Tensor x0 = randn({B, H, 3, D}, 1, dt).transpose(1, 2), w0 = randn({D}, 2, dt);
    const Tensor x1 = randn({B, 5, H, D}, 3, dt);
    const Tensor cs = randn({S, D}, 4), sn = randn({S, D}, 5);
    const std::vector<Tensor> leaves = {cs, sn, x0, w0, x1};
    Tensor ref = Tensor::empty({B, S, H, D}, dt);
    run_norm_rope_reference(p, leaves, ref);
    for (int threads : {1, 2}) {
      backend::cpu::set_num_threads(threads);
      Tensor fast = Tensor::empty({B, S, H, D}, dt);
      backend::cpu::run_norm_rope(p, leaves, fast);
      EXPECT_LE(max_rel(fast, ref), dt == DType::f32 ? 2e-6 : 8e-3) << dtype_name(dt);
    }
  }
  backend::cpu::set_num_threads(0);
}

namespace {

// FLUX's q path in miniature: single = rope(norm(heads(fc(x)))); joint = rope(concat(norm_a(heads(fa(t))),
// norm(heads(fb(x))))).
struct QPath : Module {
  static constexpr int64_t H = 2, D = 16;
  QPath() : Module("QPath"), fc(32, H * D), fa(32, H * D), fb(32, H * D), norm(D, 1e-6), norm_a(D, 1e-6) {
    register_module("fc", fc);
    register_module("fb", fb);
    register_module("fa", fa);
    register_module("norm", norm);
    register_module("norm_a", norm_a);
  }
  static Tensor heads(const Tensor& t) { return t.view({t.size(0), t.size(1), H, D}); }
  std::vector<Tensor> forward(const Tensor& x, const Tensor& t, const Tensor& cs, const Tensor& sn) {
    const int64_t N = x.size(1), T = t.size(1);
    const Tensor single = ops::rope(norm(heads(fc(x))), cs.slice(0, T, T + N), sn.slice(0, T, T + N));
    const Tensor joint = ops::rope(ops::concat({norm_a(heads(fa(t))), norm(heads(fb(x)))}, 1), cs, sn);
    return {single, joint};
  }
  Linear fc, fa, fb;
  RMSNorm norm, norm_a;
};

}  // namespace

TEST(FuseRope, ToyQkPathMatchedAndBitIdenticalToEager) {
  for (DType dt : {DType::f32, DType::bf16}) {
    QPath m;
    init_parameters_randn(m, dt, 4, 0.3);
    const Tensor x = randn({2, 9, 32}, 1, dt), t = randn({2, 4, 32}, 2, dt);
    const Tensor cs = randn({13, QPath::D}, 3), sn = randn({13, QPath::D}, 4);
    const auto eager = m.forward(x, t, cs, sn);
    ForwardFn fn = [](Module& mod, const std::vector<Tensor>& in) {
      return static_cast<QPath&>(mod).forward(in[0], in[1], in[2], in[3]);
    };
    CompileOptions on, off;
    on.fullgraph = off.fullgraph = true;
    off.fuse_rope = false;
    CompiledModule con(fn, on), coff(fn, off);
    const auto y_on = con.run(m, {x, t, cs, sn}), y_off = coff.run(m, {x, t, cs, sn});
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(same_bits(y_on[i], y_off[i])) << dtype_name(dt) << " output " << i;
      EXPECT_TRUE(same_bits(y_on[i], eager[i])) << dtype_name(dt) << " output " << i;
    }
    const auto g = con.graph_for(m, {x, t, cs, sn});
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->stats.fused_ropes, 2) << g->graph.dump();
    EXPECT_EQ(g->graph.count(Node::Kind::norm_rope), 2) << g->graph.dump();
    for (const Node& n : g->graph.nodes)
      EXPECT_TRUE(n.kind != Node::Kind::op || (n.op != ops::OpKind::rms_norm && n.op != ops::OpKind::concat &&
                                               n.op != ops::OpKind::rope))
          << g->graph.dump();
    EXPECT_EQ(coff.graph_for(m, {x, t, cs, sn})->stats.fused_ropes, 0);
  }
}

TEST(FuseRope, FluxTransformerMatchedAndBitIdenticalToUnfused) {
  auto [model, eager, y_off, y_on, diffusers_out, s_off, s_on] =
      compile_test::flux_pass_ab([](CompileOptions& o) { o.fuse_rope = false; });
  EXPECT_TRUE(same_bits(y_on, y_off));
  EXPECT_LE(max_rel(y_on, eager), 1e-5);
  EXPECT_LE(max_rel(y_on, diffusers_out), 1e-4);  // Diffusers' output of the fixture
  const int64_t blocks = int64_t(model->transformer_blocks.size() + model->single_transformer_blocks.size());
  EXPECT_EQ(s_off.fused_ropes, 0);
  EXPECT_EQ(s_on.fused_ropes, 2 * blocks);  // q and k of every block
  // Per joint block 4 norms + 2 concats + 2 ropes become 2 nodes; per single block 2 norms + 2 ropes.
  const int64_t joint = int64_t(model->transformer_blocks.size()), single = blocks - joint;
  EXPECT_EQ(s_on.final_nodes, s_off.final_nodes - 6 * joint - 2 * single);
  std::printf("[flux full] %lld RMSNorm + RoPE nodes; %lld -> %lld nodes\n", (long long)s_on.fused_ropes,
              (long long)s_off.final_nodes, (long long)s_on.final_nodes);
  model->uncompile();
}
