// The compiler on a small module: what each pass does to the graph, the fused kernel against its scalar
// reference, memory planning, opaque nodes, the signature cache, and the options/env parsing.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/compile/fused_kernel.h"
#include "compile/capture.h"
#include "compile/compiled_module.h"
#include "compile/fused_reference.h"
#include "compile/passes.h"
#include "compile_test_util.h"
#include "diffq/error.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"
#include "pipelines/fake_device.h"
#include "quant/quant_method.h"
#include "modules/quantize_on_load.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using compile_test::randn;

namespace {

// fc -> silu * (h + 1) (a fusable chain) -> LayerNorm, plus a dead branch and a duplicated subexpression.
struct Toy : Module {
  Toy() : Module("Toy"), fc(16, 16), norm(16, 1e-6) {
    register_module("fc", fc);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) {
    const Tensor h = fc(x);
    const Tensor b = ops::mul(ops::silu(h), ops::add_scalar(h, 1.0));
    (void)ops::unary(x, ops::UnaryFn::exp);  // dead
    const Tensor s1 = ops::mul_scalar(x, 2.0), s2 = ops::mul_scalar(x, 2.0);
    return ops::add(norm(b), ops::add(s1, s2));
  }
  Linear fc;
  LayerNorm norm;
};

ForwardFn toy_fn() {
  return [](Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<Toy&>(m).forward(in[0])}; };
}

std::unique_ptr<Toy> make_toy(uint64_t seed) {
  auto t = std::make_unique<Toy>();
  init_parameters_randn(*t, DType::f32, seed, 0.3);
  return t;
}

}  // namespace

TEST(CompileGraph, CaptureTakesParametersAsInputs) {
  auto toy = make_toy(1);
  const Graph g = capture(*toy, toy_fn(), {randn({2, 3, 16}, 5)});
  int params = 0, constants = 0;
  for (const Node& n : g.nodes)
    for (const Ref& r : n.inputs) {
      params += r.src == Ref::Src::param;
      constants += r.src == Ref::Src::constant;
    }
  EXPECT_EQ(params, 4);  // fc.weight, fc.bias, norm.weight, norm.bias
  EXPECT_EQ(constants, 0);
}

TEST(CompileGraph, EachPassChangesTheGraphAsDocumented) {
  auto toy = make_toy(1);
  Graph g = capture(*toy, toy_fn(), {randn({2, 3, 16}, 5)});
  const size_t captured = g.nodes.size();
  EXPECT_EQ(eliminate_dead_code(g), 1);
  EXPECT_EQ(g.nodes.size(), captured - 1);
  EXPECT_EQ(eliminate_common_subexpressions(g), 1);
  const int64_t folded = fuse_elementwise(g);
  // silu and add_scalar fold into the mul; (s1 + s1) folds s1 into the add; the final add reads the
  // LayerNorm output (not elementwise), so it stays the root of that fused node.
  EXPECT_EQ(folded, 3) << g.dump();
  EXPECT_EQ(g.count(Node::Kind::fused), 2) << g.dump();
  EXPECT_EQ(eliminate_dead_code(g), 0);
}

// mul_add is recorded as the chain it stands for (mul, add, casts), so a norm and its modulation still fuse
// (FLUX's LayerNorm(x) * (1 + scale) + shift, a gated residual after it): the compiled graph holds no
// mul_add node, folds the norm into a fused program, and gives eager's bits (which the one-pass kernel
// computes) under every pass setting.
TEST(CompileGraph, MulAddIsTracedAsItsChainAndFusesWithTheNorm) {
  const ForwardFn fn = [](Module&, const std::vector<Tensor>& in) {
    const Tensor n = ops::layer_norm(in[0], {}, {}, 1e-6);                                    // [2, 3, 16] bf16
    const Tensor mod = ops::mul_add(n, in[1], in[2], DType::bf16, /*round_product=*/true);     // FLUX's modulate
    return std::vector<Tensor>{ops::mul_add(in[3], mod, in[0], DType::bf16)};                // Wan's gated residual
  };
  Module none("None");
  const std::vector<Tensor> in = {randn({2, 3, 16}, 1, DType::bf16), randn({1, 1, 16}, 2, DType::bf16),
                                  randn({1, 1, 16}, 3, DType::bf16), randn({1, 1, 16}, 4)};
  const Tensor want = fn(none, in)[0];
  Graph g = capture(none, fn, in);
  for (const Node& n : g.nodes) EXPECT_FALSE(n.kind == Node::Kind::op && n.op == ops::OpKind::mul_add) << g.dump();
  fuse_elementwise(g);
  EXPECT_GE(fuse_norm_prologue(g), 1) << g.dump();
  for (const auto& [name, o] : compile_test::pass_settings()) {
    CompiledModule cm(fn, o);
    EXPECT_TRUE(compile_test::same_bits(cm.run(none, in)[0], want)) << name;
  }
}

TEST(CompileGraph, CompiledEqualsEagerWithEveryPassSetting) {
  auto toy = make_toy(2);
  const Tensor x = randn({2, 3, 16}, 9);
  const Tensor want = toy->forward(x);
  for (const auto& [name, o] : compile_test::pass_settings()) {
    CompiledModule cm(toy_fn(), o);
    const Tensor got = cm.run(*toy, {x})[0];
    EXPECT_LE(max_rel(got, want), 1e-6) << name;
    const Tensor again = cm.run(*toy, {x})[0];  // replay from the cache
    EXPECT_LE(max_rel(again, want), 1e-6) << name;
  }
}

// On a device without a compile backend (the fake device stands in for CUDA, which registers none): dce
// and cse run; the fusing passes, concat elision, memory planning and autotune decline, and the graph's
// stats say which and why; every op node runs through the device's kernel table (one recorded kernel call
// per op node, no fused node for a CPU kernel to run); the eager result's bits.
TEST(CompileGraph, OnADeviceWithoutACompileBackendThePassesDeclineAndEveryOpRunsOnItsKernels) {
  diffq::testing::FakeDevice dev(diffq::testing::FakeDevice::Compile::none);
  {
    auto toy = make_toy(3);
    for (const auto& [name, p] : toy->named_parameters()) p->move_to(Device::cuda(0));
    const Tensor x = randn({2, 3, 16}, 5).to(Device::cuda(0));
    dev.clear_records();
    const Tensor eager = toy->forward(x);
    const size_t eager_ops = dev.records().size();
    CompileOptions o;
    o.fullgraph = true;
    o.mode = CompileMode::max_autotune;
    CompiledModule cm(toy_fn(), o);
    cm.run(*toy, {x});  // captures and compiles
    const auto g = cm.graph_for(*toy, {x});
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->graph.device, Device::cuda(0));
    EXPECT_EQ(g->backend, nullptr);
    EXPECT_EQ(g->stats.dce_removed, 1);
    EXPECT_EQ(g->stats.cse_merged, 1);
    EXPECT_EQ(g->stats.declined, (std::vector<std::string>{"fuse", "fuse_norm", "fuse_epilogue", "fuse_dequant",
                                                           "fuse_rope", "elide_concat", "plan", "inplace", "autotune"}));
    EXPECT_NE(g->stats.declined_why.find("cuda:0 has no compile backend"), std::string::npos) << g->stats.declined_why;
    EXPECT_EQ(g->graph.count(Node::Kind::op), int64_t(g->graph.nodes.size())) << g->graph.dump();
    EXPECT_FALSE(g->plan.enabled);
    EXPECT_EQ(cm.stats().autotune.nodes, 0);

    dev.clear_records();
    const Tensor y = cm.run(*toy, {x})[0];
    const auto ran = dev.records();
    EXPECT_EQ(int64_t(ran.size()), g->graph.count(Node::Kind::op));
    EXPECT_EQ(ran.size(), eager_ops - 2);  // the dead exp and the duplicated mul_scalar
    for (const auto& r : ran) EXPECT_TRUE(r.out.is_cuda()) << ops::op_name(r.kind) << " ran on " << r.out.str();
    EXPECT_TRUE(compile_test::same_bits(y.to(Device::cpu()), eager.to(Device::cpu())));
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

// On a device whose compile backend offers elementwise fusion only (CUDA's; the fake device's stands in):
// the chains fuse and run on the backend's fused kernel, the other passes decline naming the backend.
TEST(CompileGraph, OnADeviceOfferingFuseOnlyChainsFuseAndTheRestDeclines) {
  diffq::testing::FakeDevice dev;
  {
    auto toy = make_toy(3);
    for (const auto& [name, p] : toy->named_parameters()) p->move_to(Device::cuda(0));
    const Tensor x = randn({2, 3, 16}, 5).to(Device::cuda(0));
    const Tensor eager = toy->forward(x);
    CompiledModule cm(toy_fn(), {});
    const Tensor y = cm.run(*toy, {x})[0];
    const auto g = cm.graph_for(*toy, {x});
    ASSERT_NE(g, nullptr);
    EXPECT_NE(g->backend, nullptr);
    EXPECT_GT(g->graph.count(Node::Kind::fused), 0) << g->graph.dump();
    EXPECT_EQ(g->stats.declined, (std::vector<std::string>{"fuse_norm", "fuse_epilogue", "fuse_dequant", "fuse_rope",
                                                           "elide_concat", "plan", "inplace"}));
    EXPECT_NE(g->stats.declined_why.find("cuda:0's compile backend does not offer them"), std::string::npos)
        << g->stats.declined_why;
    EXPECT_FALSE(g->plan.enabled);
    EXPECT_LE(max_rel(y.to(Device::cpu()), eager.to(Device::cpu())), 2e-6);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(CompileGraph, OneGraphServesEveryModuleOfTheSameStructure) {
  auto a = make_toy(3), b = make_toy(4);
  const Tensor x = randn({1, 5, 16}, 11);
  CompiledModule cm(toy_fn(), {});
  const Tensor ya = cm.run(*a, {x})[0], yb = cm.run(*b, {x})[0];
  EXPECT_EQ(cm.stats().captures, 1);
  EXPECT_EQ(cm.stats().hits, 1);
  EXPECT_LE(max_rel(ya, a->forward(x)), 1e-6);
  EXPECT_LE(max_rel(yb, b->forward(x)), 1e-6);
  EXPECT_GT(max_rel(ya, yb), 1e-2);  // different weights really were used
}

TEST(CompileGraph, SignatureCacheHitsAndMisses) {
  auto toy = make_toy(5);
  CompiledModule cm(toy_fn(), {});
  cm.run(*toy, {randn({1, 5, 16}, 1)});
  cm.run(*toy, {randn({1, 5, 16}, 2)});  // same signature, other values: hit
  EXPECT_EQ(cm.stats().captures, 1);
  EXPECT_EQ(cm.stats().hits, 1);
  const Tensor x7 = randn({1, 7, 16}, 3);
  EXPECT_LE(max_rel(cm.run(*toy, {x7})[0], toy->forward(x7)), 1e-6);  // new shape: miss
  EXPECT_EQ(cm.stats().captures, 2);
  cm.run(*toy, {randn({1, 7, 16}, 3, DType::bf16)});  // new dtype: miss
  EXPECT_EQ(cm.stats().captures, 3);
  // Parameter dtype is part of the signature too.
  auto toy16 = make_toy(5);
  init_parameters_randn(*toy16, DType::bf16, 5, 0.3);
  cm.run(*toy16, {randn({1, 7, 16}, 3, DType::bf16)});
  EXPECT_EQ(cm.stats().captures, 4);
  EXPECT_NE(CompiledModule::signature(*toy, {x7}), CompiledModule::signature(*toy16, {x7}));
}

TEST(CompileGraph, MemoryPlanReusesBuffersAndWritesInPlace) {
  // A chain where every intermediate is read once and then dies: the arena needs two buffers.
  struct Chain : Module {
    Chain() : Module("Chain") {}
    Tensor forward(const Tensor& x) {
      Tensor h = x;
      for (int i = 0; i < 6; ++i) h = ops::softmax(ops::add(ops::softmax(h), x));
      return ops::softmax(h);
    }
  } chain;
  ForwardFn fn = [](Module& m, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<Chain&>(m).forward(in[0])};
  };
  const Tensor x = randn({4, 64}, 2);
  CompiledModule cm(fn, {});
  const Tensor got = cm.run(chain, {x})[0];
  EXPECT_LE(max_rel(got, chain.forward(x)), 1e-6);
  const auto g = cm.graph_for(chain, {x});
  ASSERT_NE(g, nullptr);
  const int64_t buf = 4 * 64 * 4;
  EXPECT_EQ(g->plan.unplanned_bytes, 18 * buf);  // 19 ops, the last one is the output
  EXPECT_LE(g->plan.arena_bytes, 2 * buf);
  EXPECT_GE(g->plan.num_inplace(), 6);  // each add overwrites the softmax it reads
}

TEST(CompileGraph, FusedKernelMatchesScalarReference) {
  // ((a * b) + silu(c)) - clamp(gelu_tanh(a), -0.5, 0.5), b and c broadcast, then 3 - that.
  const FusedProgram p = compile_test::sample_fused_program();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor a = randn({3, 37, 130}, 1), b = randn({37, 1}, 2), c = randn({130}, 3, dt);
    Tensor fast = Tensor::empty({3, 37, 130}, dt), ref = Tensor::empty({3, 37, 130}, dt);
    backend::cpu::run_fused(p, {a, b, c}, fast);
    run_fused_reference(p, {a, b, c}, ref);
    EXPECT_LE(max_rel(fast, ref), dt == DType::f32 ? 2e-6 : 8e-3) << dtype_name(dt);
  }
  // With a LayerNorm / RMSNorm prologue standing for leaf 0 (x, w, b are leaves 3, 4, 5).
  for (bool rms : {false, true}) {
    FusedProgram q = p;
    NormPrologue np;
    np.rms = rms;
    np.eps = 1e-6;
    np.leaf = 0;
    np.x = 3;
    np.w = 4;
    np.b = rms ? -1 : 5;
    q.norm = np;
    const Tensor x = randn({2, 9, 1100}, 7).slice(2, 0, 1030), w = randn({1030}, 8), bias = randn({1030}, 9);
    const Tensor b = randn({9, 1}, 2), c = randn({1030}, 3);
    Tensor fast = Tensor::empty({2, 9, 1030}, DType::f32), ref = Tensor::empty({2, 9, 1030}, DType::f32);
    backend::cpu::run_fused(q, {x, b, c, x, w, bias}, fast);
    run_fused_reference(q, {x, b, c, x, w, bias}, ref);
    EXPECT_LE(max_rel(fast, ref), 2e-6) << (rms ? "rms" : "layer") << " norm prologue";
  }
  // Strided (transposed) leaf.
  const Tensor a = randn({40, 50}, 4).transpose(0, 1), b = randn({50, 40}, 5), c = randn({1}, 6);
  Tensor fast = Tensor::empty({50, 40}, DType::f32), ref = Tensor::empty({50, 40}, DType::f32);
  backend::cpu::run_fused(p, {a, b, c}, fast);
  run_fused_reference(p, {a, b, c}, ref);
  EXPECT_LE(max_rel(fast, ref), 2e-6);
}

TEST(CompileGraph, QuantizedLinearBecomesAnOpaqueNodeOrAQuantizedGemmPrologue) {
  auto toy = make_toy(6);
  const auto [backend, kwargs] = quant::quant_shorthand("int8wo", "float32");
  const auto method = quant::make_quant_method(backend, kwargs);
  ASSERT_GT(quantize_module(*toy, *method), 0);
  ASSERT_TRUE(toy->fc.weight.is_quantized());
  const Tensor x = randn({2, 3, 16}, 7);
  const Tensor want = toy->forward(x);
  // Without fuse_dequant the quantized linear is an opaque call of the real module.
  CompileOptions o = disable_passes({}, "fuse_dequant", "test");
  o.fullgraph = true;
  CompiledModule cm(toy_fn(), o);
  const Tensor opaque = cm.run(*toy, {x})[0];
  EXPECT_LE(max_rel(opaque, want), 1e-6);
  const auto g = cm.graph_for(*toy, {x});
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->stats.opaque_nodes, 1);
  EXPECT_EQ(g->stats.fused_dequant, 0);
  EXPECT_NE(g->graph.dump().find("opaque(fc)"), std::string::npos) << g->graph.dump();
  // With it (the default), fc's output is read once by an elementwise op: the scheme's GEMM becomes that
  // node's prologue (dequantize inside the GEMM), same bits.
  CompileOptions on;
  on.fullgraph = true;
  CompiledModule fused(toy_fn(), on);
  EXPECT_TRUE(compile_test::same_bits(fused.run(*toy, {x})[0], opaque));
  const auto gf = fused.graph_for(*toy, {x});
  ASSERT_NE(gf, nullptr);
  EXPECT_EQ(gf->stats.opaque_nodes, 0) << gf->graph.dump();
  EXPECT_EQ(gf->stats.fused_dequant, 1) << gf->graph.dump();
  EXPECT_NE(gf->graph.dump().find("qlinear(x"), std::string::npos) << gf->graph.dump();
}

TEST(CompileGraph, HookedModuleIsOpaqueOrAnError) {
  struct Counter : ModuleHook {
    int n = 0;
    void pre_forward(Module&) override { ++n; }
  };
  auto toy = make_toy(7);
  auto hook = std::make_shared<Counter>();
  toy->fc.add_hook(hook);  // a one-input layer: opaque, its hook runs at every replay
  const Tensor x = randn({1, 2, 16}, 1);
  CompiledModule cm(toy_fn(), {});
  cm.run(*toy, {x});
  cm.run(*toy, {x});
  EXPECT_EQ(hook->n, 2);
  EXPECT_EQ(cm.stats().eager_fallbacks, 0);

  // A hook on a module that is not a one-input layer cannot be replayed: Error with fullgraph, eager
  // fallback (the same numbers) without.
  struct Wrapper : Module {
    Wrapper() : Module("Wrapper") { register_module("inner", inner); }
    struct Inner : Module {
      Inner() : Module("Inner"), fc(16, 16) { register_module("fc", fc); }
      Tensor operator()(const Tensor& x) { return call([&] { return ops::silu(fc(x)); }); }
      Linear fc;
    } inner;
  } w;
  init_parameters_randn(w, DType::f32, 3, 0.3);
  w.inner.add_hook(std::make_shared<Counter>());
  ForwardFn fn = [](Module& m, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<Wrapper&>(m).inner(in[0])};
  };
  CompileOptions strict;
  strict.fullgraph = true;
  CompiledModule bad(fn, strict);
  try {
    bad.run(w, {x});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'inner'"), std::string::npos) << e.what();
  }
  CompiledModule lenient(fn, {});
  const Tensor y = lenient.run(w, {x})[0];
  EXPECT_EQ(lenient.stats().eager_fallbacks, 1);
  EXPECT_LE(max_rel(y, w.inner(x)), 0.0);
}

TEST(CompileOptions, DisableListAndEnv) {
  const CompileOptions o = disable_passes({}, "fuse,cse", "test");
  EXPECT_FALSE(o.fuse);
  EXPECT_FALSE(o.cse);
  EXPECT_TRUE(o.dce && o.plan && o.inplace);
  EXPECT_EQ(o.passes_str(), "dce,fuse_norm,fuse_epilogue,fuse_dequant,fuse_rope,elide_concat,plan,inplace");
  EXPECT_FALSE(disable_passes({}, "fuse_dequant", "test").fuse_dequant);
  EXPECT_FALSE(disable_passes({}, "all", "test").fuse_dequant);
  EXPECT_THROW(disable_passes({}, "fusion", "DIFFQ_COMPILE_DISABLE"), Error);
  setenv("DIFFQ_COMPILE_DISABLE", "plan", 1);
  EXPECT_FALSE(apply_env({}).plan);
  unsetenv("DIFFQ_COMPILE_DISABLE");
  EXPECT_TRUE(apply_env({}).plan);
  EXPECT_EQ(parse_compile_mode("max-autotune"), CompileMode::max_autotune);
  EXPECT_THROW(parse_compile_mode("fast"), Error);
}
