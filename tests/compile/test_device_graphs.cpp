// compile's reduce-overhead mode on a device (compile/device_graphs.h), checked host-side on the fake
// device, which captures as a CUDA graph does (kernels recorded, not run, on the addresses they were
// handed; allocations from a graph pool) and replays the recording. Shown: a key runs eagerly once
// (warm-up), is captured on its second call and replayed after (no kernel of the body is launched
// again, only the copies in and out); every call gives eager's bits for its own inputs; a changed shape,
// LoRA (adapter set, weight, scale) or offload state (the weights moved) is a new key, never a stale
// replay; a body that waits on the host or keeps a tensor it made cannot be captured and runs eagerly.
// What this cannot show: that the CUDA graph API does the same on a GPU (the device check runs the
// pipeline with reduce-overhead there).
#include <gtest/gtest.h>

#include "compile/compiled_module.h"
#include "compile_test_util.h"
#include "lora/lora_linear.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"
#include "pipelines/fake_device.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::randn;

namespace {

struct Block : Module {
  Block() : Module("Block"), fc(16, 16), norm(16, 1e-6) {
    register_module("fc", fc);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) { return ops::add(norm(ops::silu(fc(x))), x); }
  Linear fc;
  LayerNorm norm;
};

ForwardFn block_fn() {
  return [](Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<Block&>(m).forward(in[0])}; };
}

std::unique_ptr<Block> block_on_device(uint64_t seed) {
  auto b = std::make_unique<Block>();
  init_parameters_randn(*b, DType::f32, seed, 0.3);
  for (const auto& [name, p] : b->named_parameters()) p->move_to(Device::cuda(0));
  return b;
}

CompileOptions reduce_overhead() {
  CompileOptions o;
  o.mode = CompileMode::reduce_overhead;
  return o;
}

Tensor on_device(const Shape& s, uint64_t seed) { return randn(s, seed).to(Device::cuda(0)); }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// The eager result of b on x, as bits on the host.
Tensor eager(Block& b, const Tensor& x) { return host(b.forward(x)); }

}  // namespace

TEST(DeviceGraphs, WarmUpThenCaptureThenReplayGivingEagerBitsForEachCallsInputs) {
  diffq::testing::FakeDevice dev;
  {
    auto b = block_on_device(1);
    CompiledModule cm(block_fn(), reduce_overhead());
    for (int call = 0; call < 4; ++call) {
      const Tensor x = on_device({2, 3, 16}, 100 + call);  // new values every call: a replay must read them
      const Tensor want = eager(*b, x);
      dev.clear_records();
      const Tensor y = cm.run(*b, {x})[0];
      const auto ran = dev.records();
      EXPECT_TRUE(compile_test::same_bits(host(y), want)) << "call " << call;
      const DeviceGraphStats s = cm.stats().device_graphs;
      EXPECT_EQ(s.warmups, 1) << call;
      EXPECT_EQ(s.captures, call >= 1 ? 1 : 0) << call;
      EXPECT_EQ(s.replays, call >= 1 ? call : 0) << call;
      EXPECT_EQ(s.refused, 0) << call;
      EXPECT_EQ(dev.captures(), call >= 1 ? 1 : 0);
      EXPECT_EQ(dev.replays(), call >= 1 ? call : 0);
      if (call >= 2) {  // a pure replay: the copy in, the copy out, nothing of the block launched again
        ASSERT_EQ(ran.size(), 2u) << call;
        for (const auto& r : ran) EXPECT_EQ(r.kind, ops::OpKind::copy) << ops::op_name(r.kind);
      }
    }
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceGraphs, OneGraphPerBlockAndTheirBuffersShareTheGraphPool) {
  diffq::testing::FakeDevice dev;
  {
    auto a = block_on_device(1), b = block_on_device(2);  // one compiled module serves both (regional)
    CompiledModule cm(block_fn(), reduce_overhead());
    for (int step = 0; step < 3; ++step) {
      const Tensor x = on_device({1, 5, 16}, 10 + step);
      const Tensor h = cm.run(*a, {x})[0];
      const Tensor y = cm.run(*b, {h})[0];
      EXPECT_TRUE(compile_test::same_bits(host(y), eager(*b, a->forward(x)))) << step;
    }
    const DeviceGraphStats s = cm.stats().device_graphs;
    EXPECT_EQ(s.captures, 2);  // a's weights and b's are at other addresses: two keys
    EXPECT_EQ(s.graphs, 2);
    EXPECT_EQ(s.replays, 2 * 2);
    // Captures share freed graph-pool blocks: the second capture took no more blocks than the first.
    EXPECT_LE(dev.graph_pool_blocks(), 8);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceGraphs, AChangedShapeIsANewKeyNeverAStaleReplay) {
  diffq::testing::FakeDevice dev;
  {
    auto b = block_on_device(3);
    CompiledModule cm(block_fn(), reduce_overhead());
    for (const Shape& s : {Shape{1, 4, 16}, Shape{1, 4, 16}, Shape{2, 7, 16}, Shape{2, 7, 16}, Shape{1, 4, 16}}) {
      const Tensor x = on_device(s, uint64_t(s[1]) * 7);
      EXPECT_TRUE(compile_test::same_bits(host(cm.run(*b, {x})[0]), eager(*b, x))) << shape_str(s);
    }
    const DeviceGraphStats st = cm.stats().device_graphs;
    EXPECT_EQ(st.warmups, 2);
    EXPECT_EQ(st.captures, 2);
    EXPECT_EQ(st.replays, 3);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceGraphs, ALoraChangeIsANewKey) {
  diffq::testing::FakeDevice dev;
  {
    auto b = block_on_device(4);
    auto lora = std::make_shared<lora::LoraLinear>();
    lora::LoraLinear::Slot slot;
    slot.adapter = "style";
    slot.A = randn({4, 16}, 41);
    slot.B = randn({16, 4}, 42);
    slot.scaling = 0.5;
    lora->slots.push_back(slot);
    b->fc.adapter = lora;
    CompiledModule cm(block_fn(), reduce_overhead());
    const auto run_twice_and_check = [&](const char* what) {
      for (int i = 0; i < 3; ++i) {
        const Tensor x = on_device({1, 6, 16}, 77 + i);
        const Tensor want = eager(*b, x);
        EXPECT_TRUE(compile_test::same_bits(host(cm.run(*b, {x})[0]), want)) << what << " call " << i;
      }
    };
    run_twice_and_check("adapter at 1.0");
    const int64_t captured = cm.stats().device_graphs.captures;
    EXPECT_GE(captured, 1);
    lora->slots[0].weight = 0.25;  // set_adapters' weight
    run_twice_and_check("adapter at 0.25");
    EXPECT_GT(cm.stats().device_graphs.captures, captured);
    const int64_t captured2 = cm.stats().device_graphs.captures;
    lora->slots[0].active = false;  // adapter switched off
    run_twice_and_check("adapter off");
    EXPECT_GT(cm.stats().device_graphs.captures, captured2);
    b->fc.adapter.reset();
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceGraphs, WeightsMovedByOffloadingAreANewKey) {
  diffq::testing::FakeDevice dev;
  {
    auto b = block_on_device(5);
    CompiledModule cm(block_fn(), reduce_overhead());
    const Tensor x = on_device({1, 3, 16}, 9);
    for (int i = 0; i < 3; ++i) cm.run(*b, {x});
    EXPECT_EQ(cm.stats().device_graphs.captures, 1);
    // Offloaded and brought back: other weights (new values here) at other addresses.
    for (const auto& [name, p] : b->named_parameters()) {
      p->move_to(Device::cpu());
      p->set(ops::mul_scalar(p->dense(), 1.5), Residency::host);
      p->move_to(Device::cuda(0));
    }
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(compile_test::same_bits(host(cm.run(*b, {x})[0]), eager(*b, x))) << i;
    EXPECT_EQ(cm.stats().device_graphs.captures, 2);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

namespace {
// A block that reads a value back to the host in its forward (a host sync a graph cannot hold).
struct ReadsBack : Module {
  ReadsBack() : Module("ReadsBack") {}
  Tensor forward(const Tensor& x) {
    const double s = host(ops::sum(x, {0})).to_f64_vector()[0];
    return ops::mul_scalar(x, s > 0 ? 2.0 : 3.0);
  }
};
// A block that keeps a tensor made in its forward (a cache filled on every call); it refuses to be traced,
// so the compiled call runs this forward (a traced graph would not keep the tensor).
struct KeepsOne : Module {
  KeepsOne() : Module("KeepsOne") {}
  Tensor forward(const Tensor& x) {
    check(!x.storage()->is_symbolic(), "test", "KeepsOne is not traceable");
    kept = ops::mul_scalar(x, 2.0);
    return ops::add(kept, x);
  }
  Tensor kept;
};
}  // namespace

TEST(DeviceGraphs, WhatACaptureCannotHoldRunsEagerlyWithTheReason) {
  diffq::testing::FakeDevice dev;
  {
    ReadsBack rb;
    CompiledModule cm([](Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<ReadsBack&>(m).forward(in[0])}; },
                      reduce_overhead());
    for (int i = 0; i < 4; ++i) {
      const Tensor x = on_device({8}, 30 + i);
      EXPECT_TRUE(compile_test::same_bits(host(cm.run(rb, {x})[0]), host(rb.forward(x)))) << i;
    }
    const DeviceGraphStats s = cm.stats().device_graphs;
    EXPECT_EQ(s.captures, 0);
    EXPECT_EQ(s.refused, 3);  // the capture attempt, then every later call of the key
    EXPECT_NE(s.last_refusal.find("cannot be part of a captured graph"), std::string::npos) << s.last_refusal;

    KeepsOne k;
    CompiledModule ck([](Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<KeepsOne&>(m).forward(in[0])}; },
                      reduce_overhead());
    for (int i = 0; i < 3; ++i) {
      const Tensor x = on_device({8}, 50 + i);
      EXPECT_TRUE(compile_test::same_bits(host(ck.run(k, {x})[0]), host(ops::mul_scalar(x, 3.0)))) << i;
    }
    const DeviceGraphStats ks = ck.stats().device_graphs;
    EXPECT_EQ(ks.captures, 0);
    EXPECT_NE(ks.last_refusal.find("outlives"), std::string::npos) << ks.last_refusal;
    k.kept = Tensor();
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceGraphs, OnTheCpuReduceOverheadIsTheDefaultMode) {
  auto b = std::make_unique<Block>();
  init_parameters_randn(*b, DType::f32, 6, 0.3);
  CompiledModule cm(block_fn(), reduce_overhead());
  const Tensor x = randn({1, 3, 16}, 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(compile_test::same_bits(cm.run(*b, {x})[0], b->forward(x)));
  const DeviceGraphStats s = cm.stats().device_graphs;
  EXPECT_EQ(s.warmups + s.captures + s.replays + s.refused, 0);
}
