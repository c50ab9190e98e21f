// Concat elision (src/compile/elide_concat.cpp): producers of every kind that can write through a
// strided view (GEMM-prologue node, plain linear, copy of a transposed attention output, elementwise
// and norm-prologue fused nodes) write straight into their slice of the concat's buffer, the concat
// runs no kernel and the arena shrinks; inputs that must not be placed (read by another node too,
// slices whose rows a GEMM cannot write) are still copied, and every case equals eager. On FLUX's tiny
// transformer the single blocks' cat([attn, mlp]) is elided and the planned arena is smaller.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "compile/capture.h"
#include "compile/compiled_module.h"
#include "compile/passes.h"
#include "compile_test_util.h"
#include "diffq/memory.h"
#include "io/safetensors.h"
#include "models/flux/flux_transformer.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using compile_test::pass_settings;
using compile_test::randn;

namespace {

// out = fc_out(cat([attn(x), gelu(fc_mlp(x)), x * x, fc_lin(x), layer_norm(x) * (x + 1)], -1))
struct CatBlock : Module {
  CatBlock()
      : Module("CatBlock"), fc_qkv(16, 16), fc_mlp(16, 32), fc_lin(16, 8), fc_out(16 + 32 + 16 + 8 + 16, 16),
        norm(16, 1e-6) {
    register_module("fc_qkv", fc_qkv);
    register_module("fc_mlp", fc_mlp);
    register_module("fc_lin", fc_lin);
    register_module("fc_out", fc_out);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) {
    const int64_t B = x.size(0), S = x.size(1);
    const Tensor q = fc_qkv(x).view({B, S, 2, 8}).transpose(1, 2);                // [B, 2, S, 8]
    const Tensor a = ops::sdpa(q, q, q).transpose(1, 2).reshape({B, S, 16});     // a copy of a transposed view
    const Tensor m = ops::gelu(fc_mlp(x), true);                                  // GEMM prologue
    const Tensor e = ops::mul(ops::add_scalar(x, 2.0), x);                        // fused elementwise
    const Tensor l = fc_lin(x);                                                   // plain linear
    const Tensor n = ops::mul(norm(x), ops::add_scalar(x, 1.0));                  // norm prologue
    return fc_out(ops::concat({a, m, e, l, n}, -1));
  }
  Linear fc_qkv, fc_mlp, fc_lin, fc_out;
  LayerNorm norm;
};

// Concats that must not (entirely) be elided: u is also read by another node (copied, v placed); along
// dim 1 with B = 2 the linear's rows in its slice are not one stride apart (copied) while the
// elementwise producer's rows are (placed); along dim 0 the slices are contiguous and the concat is a
// graph output (its buffer is a separate allocation, made when its first producer runs).
struct Mixed : Module {
  Mixed() : Module("Mixed"), fc(8, 8) { register_module("fc", fc); }
  std::vector<Tensor> forward(const Tensor& x) {
    const Tensor u = ops::mul(x, x), v = ops::silu(ops::add_scalar(x, 1.0));
    const Tensor c1 = ops::concat({u, v}, -1);                                                    // [B, S, 16]
    const Tensor c2 = ops::concat({fc(x), ops::unary(ops::mul_scalar(x, 0.5), ops::UnaryFn::exp)}, 1);  // [B, 2S, 8]
    const Tensor c3 = ops::concat({ops::mul_scalar(x, 3.0), ops::silu(x)}, 0);                    // [2B, S, 8]
    return {ops::mul(c1, c1), ops::mul_scalar(u, 2.0), ops::mul_scalar(c2, 1.5), c3};
  }
  Linear fc;
};

ForwardFn cat_block_fn() {
  return [](Module& m, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<CatBlock&>(m).forward(in[0])};
  };
}
ForwardFn mixed_fn() {
  return [](Module& m, const std::vector<Tensor>& in) { return static_cast<Mixed&>(m).forward(in[0]); };
}

std::vector<const Node*> concats(const Graph& g) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::op && n.op == ops::OpKind::concat) out.push_back(&n);
  return out;
}

int64_t planned_arena(Module& m, const ForwardFn& fn, const Tensor& x, bool elide) {
  CompileOptions o;
  o.elide_concat = elide;
  return compile_graph(capture(m, fn, {x}), o).plan.arena_bytes;
}

}  // namespace

TEST(ElideConcat, ProducersWriteIntoTheConcatBuffer) {
  CatBlock blk;
  init_parameters_randn(blk, DType::f32, 7, 0.3);
  const Tensor x = randn({2, 5, 16}, 3, DType::f32, 1.f);
  const CompiledGraph cg = compile_graph(capture(blk, cat_block_fn(), {x}), CompileOptions{});
  const auto cats = concats(cg.graph);
  ASSERT_EQ(cats.size(), 1u) << cg.graph.dump();
  EXPECT_TRUE(cats[0]->elided) << cg.graph.dump();
  EXPECT_EQ(cats[0]->placed, std::vector<bool>(5, true)) << cg.graph.dump();
  EXPECT_EQ(cg.stats.placed_in_concat, 5);
  int placed = 0;
  for (const Node& n : cg.graph.nodes) placed += n.host >= 0 && cg.plan.offset[size_t(&n - cg.graph.nodes.data())] < 0;
  EXPECT_EQ(placed, 5);  // no buffer of their own
  // The five producers' buffers no longer coexist with the concat's: the arena shrinks.
  const int64_t on = planned_arena(blk, cat_block_fn(), x, true), off = planned_arena(blk, cat_block_fn(), x, false);
  EXPECT_LT(on, off);
  std::printf("[elide_concat] toy block arena %lld bytes with the pass, %lld without\n", (long long)on, (long long)off);

  const Tensor eager = blk.forward(x);
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(cat_block_fn(), o);
    EXPECT_LE(max_rel(cm.run(blk, {x})[0], eager), 1e-5) << name;
    EXPECT_LE(max_rel(cm.run(blk, {x})[0], eager), 1e-5) << name << " (cached)";
  }
}

TEST(ElideConcat, InputsThatMustNotBePlacedAreCopied) {
  Mixed mx;
  init_parameters_randn(mx, DType::f32, 9, 0.3);
  const Tensor x = randn({2, 5, 8}, 4, DType::f32, 1.f);
  const CompiledGraph cg = compile_graph(capture(mx, mixed_fn(), {x}), CompileOptions{});
  const auto cats = concats(cg.graph);
  ASSERT_EQ(cats.size(), 3u) << cg.graph.dump();
  for (const Node* c : cats) EXPECT_TRUE(c->elided) << cg.graph.dump();
  EXPECT_EQ(cats[0]->placed, (std::vector<bool>{false, true})) << cg.graph.dump();  // u is read twice
  EXPECT_EQ(cats[1]->placed, (std::vector<bool>{false, true})) << cg.graph.dump();  // linear rows, dim 1
  EXPECT_EQ(cats[2]->placed, (std::vector<bool>{true, true})) << cg.graph.dump();   // dim 0: contiguous slices

  const std::vector<Tensor> eager = mx.forward(x);
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(mixed_fn(), o);
    const std::vector<Tensor> got = cm.run(mx, {x});
    ASSERT_EQ(got.size(), eager.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(max_rel(got[i], eager[i]), 1e-5) << name << " output " << i;
  }
}

TEST(ElideConcat, ReassembledBufferIsNotCopied) {
  // cat([y[:, :2], y[:, 2:]], 1) is y: the concat disappears.
  struct Split : Module {
    Split() : Module("Split") {}
  } m;
  const ForwardFn fn = [](Module&, const std::vector<Tensor>& in) {
    const Tensor y = ops::silu(ops::add_scalar(in[0], 0.5));
    const Tensor h = ops::concat({y.slice(1, 0, 2), y.slice(1, 2, 5)}, 1);
    return std::vector<Tensor>{ops::mul(h, ops::add_scalar(h, 1.0))};
  };
  const Tensor x = randn({2, 5, 8}, 5, DType::f32, 1.f);
  const CompiledGraph cg = compile_graph(capture(m, fn, {x}), CompileOptions{});
  EXPECT_TRUE(concats(cg.graph).empty()) << cg.graph.dump();
  CompileOptions off;
  off.elide_concat = false;
  EXPECT_EQ(concats(compile_graph(capture(m, fn, {x}), off).graph).size(), 1u);
  const Tensor eager = fn(m, {x})[0];
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(fn, o);
    EXPECT_LE(max_rel(cm.run(m, {x})[0], eager), 1e-5) << name;
  }
}

TEST(ElideConcat, ConcatOfGraphInputsIsAViewWhenTheyLieInOrder) {
  // cat([b, a], 1) of the graph inputs, then h * (h + 1) (in place over a planned h): when b and a are
  // the slices [:, :3] and [:, 3:] of one tensor, the concat is a view of it (no copy, no allocation)
  // and the caller's tensor is never written; otherwise (separate tensors, or the wrong order) a copy.
  struct Two : Module {
    Two() : Module("Two") {}
  } m;
  const ForwardFn fn = [](Module&, const std::vector<Tensor>& in) {
    const Tensor h = ops::concat({in[1], in[0]}, 1);
    return std::vector<Tensor>{ops::mul(h, ops::add_scalar(h, 1.0))};
  };
  const Tensor y = randn({1, 8, 64}, 3, DType::f32, 1.f);
  const Tensor y_before = y.contiguous().clone();
  const Tensor b = y.slice(1, 0, 3), a = y.slice(1, 3, 8);
  const Tensor want = fn(m, {a, b})[0];
  const CompiledGraph cg = compile_graph(capture(m, fn, {a, b}), CompileOptions{});
  int aliased = 0;
  for (const Node& n : cg.graph.nodes) aliased += n.alias_inputs;
  EXPECT_EQ(aliased, 1) << cg.graph.dump();
  CompileOptions o;
  o.fullgraph = true;
  CompiledModule cm(fn, o);
  cm.run(m, {a, b});  // compile
  const int64_t concat_bytes = 8 * 64 * 4;
  auto peak_of_run = [&](const Tensor& a_in, const Tensor& b_in, Tensor* out) {
    reset_peak_memory_stats(Device::cpu());
    const int64_t base = memory_stats(Device::cpu()).current_bytes;
    *out = cm.run(m, {a_in, b_in})[0];
    return memory_stats(Device::cpu()).peak_bytes - base;
  };
  Tensor got;
  const int64_t peak_view = peak_of_run(a, b, &got);
  EXPECT_TRUE(compile_test::same_bits(got, want));
  EXPECT_TRUE(compile_test::same_bits(y, y_before));  // the inputs' buffer is read, never written
  // Separate tensors (and the same two slices swapped: not in the concat's order) are copied.
  const Tensor a2 = a.contiguous().clone(), b2 = b.contiguous().clone();
  const int64_t peak_copy = peak_of_run(a2, b2, &got);
  EXPECT_TRUE(compile_test::same_bits(got, want));
  EXPECT_GE(peak_copy - peak_view, concat_bytes);
  const Tensor swapped = ops::concat({a, b}, 1);  // [a | b]: b does not come first
  const Tensor sa = swapped.slice(1, 0, 5), sb = swapped.slice(1, 5, 8);
  EXPECT_TRUE(compile_test::same_bits(cm.run(m, {sa, sb})[0], fn(m, {sa, sb})[0]));
}

TEST(ElideConcat, FluxSingleBlocksConcatIsElidedAndTheArenaShrinks) {
  const std::filesystem::path dir = std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux";
  auto model = models::flux::FluxTransformer2DModel::from_pretrained(dir / "transformer");
  const auto ref = io::SafetensorsFile::open(dir / "reference/transformer_forward.safetensors");
  auto run = [&] {
    return (*model)(ref.tensor("in.hidden_states"), ref.tensor("in.encoder_hidden_states"),
                    ref.tensor("in.pooled_projections"), ref.tensor("in.timestep"), ref.tensor("in.guidance"),
                    ref.tensor("in.txt_ids"), ref.tensor("in.img_ids"));
  };
  const Tensor eager = run();
  int64_t arena[2] = {0, 0}, placed[2] = {0, 0};
  for (int on = 0; on < 2; ++on) {
    CompileOptions o;
    o.fullgraph = true;
    o.elide_concat = on == 1;
    model->compile(o);
    EXPECT_LE(max_rel(run(), eager), 1e-5) << "elide_concat " << on;
    const CompileStats st = model->compiled_modules()[0]->stats();
    arena[on] = st.last_arena_bytes;
    placed[on] = st.last_passes.placed_in_concat;
  }
  EXPECT_EQ(placed[0], 0);
  // Per single block: attn and mlp into cat([attn, mlp]) (and cat([txt, img]) reassembled or placed);
  // per joint block: v_txt and v_img into v.
  EXPECT_GE(placed[1], 2 * int64_t(model->single_transformer_blocks.size()));
  EXPECT_LT(arena[1], arena[0]);
  std::printf("[elide_concat] tiny FLUX full graph: %lld producers placed / concats removed; arena %lld bytes with "
              "the pass, %lld without\n", (long long)placed[1], (long long)arena[1], (long long)arena[0]);
  model->uncompile();
}

TEST(ElideConcat, Bf16PlacedWritersGiveTheUnplacedBits) {
  // bf16: GEMM writers round through a scratch tile into the slice; every writer rounds as before.
  CatBlock blk;
  init_parameters_randn(blk, DType::bf16, 7, 0.3);
  const Tensor x = randn({2, 5, 16}, 3, DType::bf16, 1.f);
  CompileOptions on, off;
  on.fullgraph = off.fullgraph = true;
  off.elide_concat = false;
  CompiledModule a(cat_block_fn(), on), b(cat_block_fn(), off);
  const Tensor ya = a.run(blk, {x})[0], yb = b.run(blk, {x})[0];
  EXPECT_EQ(a.stats().last_passes.placed_in_concat, 5);
  ASSERT_EQ(ya.dtype(), DType::bf16);
  EXPECT_EQ(ya.to_f64_vector(), yb.to_f64_vector());
  EXPECT_LE(max_rel(ya, blk.forward(x)), 1e-2);
}

TEST(ElideConcat, SlicesContiguousButForSizeOneDimsTakeAnyWriter) {
  // [1, 8] + [1, 8] -> [1, 16] along the last dim: each slice is contiguous (only the size-1 dim's
  // stride differs), so plain elementwise op nodes write there too.
  struct Empty : Module {
    Empty() : Module("Empty") {}
  } m;
  const ForwardFn fn = [](Module&, const std::vector<Tensor>& in) {
    const Tensor c = ops::concat({ops::unary(in[0], ops::UnaryFn::exp), ops::silu(in[0])}, 1);
    return std::vector<Tensor>{ops::mul(c, ops::add_scalar(c, 1.0))};
  };
  const Tensor x = randn({1, 8}, 6, DType::f32, 1.f);
  const CompiledGraph cg = compile_graph(capture(m, fn, {x}), CompileOptions{});
  const auto cats = concats(cg.graph);
  ASSERT_EQ(cats.size(), 1u);
  EXPECT_EQ(cats[0]->placed, (std::vector<bool>{true, true})) << cg.graph.dump();
  const Tensor eager = fn(m, {x})[0];
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(fn, o);
    EXPECT_LE(max_rel(cm.run(m, {x})[0], eager), 1e-5) << name;
  }
}
