// CUDA graphs behind compile's reduce-overhead mode (compile/device_graphs.h, backend/cuda/graph_capture.cpp)
// on a real GPU: a block with cuBLASLt linears, elementwise kernels, a norm and cuDNN attention is
// captured on its second call and replayed after, giving eager's bits for each call's own inputs; its
// buffers live in the graph pool, which keeps its segments while a graph lives and returns them after;
// a block that reads back to the host is refused cleanly and runs eagerly. Skips without a GPU.
#include <gtest/gtest.h>

#include "backend/cuda/allocator.h"
#include "compile/compiled_module.h"
#include "gpu_test.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"

namespace diffq {
namespace {

struct AttnBlock : Module {
  AttnBlock() : Module("AttnBlock"), qkv(64, 192), out(64, 64), norm(64, 1e-6) {
    register_module("qkv", qkv);
    register_module("out", out);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) {  // x [B, S, 64], 2 heads of 32
    const int64_t B = x.size(0), S = x.size(1);
    const Tensor h = qkv(norm(x)).view({B, S, 3, 2, 32});
    const Tensor q = h.select(2, 0).transpose(1, 2).contiguous();  // [B, 2, S, 32]
    const Tensor k = h.select(2, 1).transpose(1, 2).contiguous();
    const Tensor v = h.select(2, 2).transpose(1, 2).contiguous();
    const Tensor a = ops::sdpa(q, k, v).transpose(1, 2).contiguous().view({B, S, 64});
    return ops::add(x, out(ops::gelu(a, /*tanh_approx=*/true)));
  }
  Linear qkv, out;
  LayerNorm norm;
};

compile::CompileOptions reduce_overhead() {
  compile::CompileOptions o;
  o.mode = compile::CompileMode::reduce_overhead;
  return o;
}

std::vector<uint8_t> bits(const Tensor& t) { return cudatest::bytes_of(t.to(Device::cpu())); }

TEST(CudaGraphs, ABlockIsCapturedOnceAndReplayedWithEagerBits) {
  DIFFQ_REQUIRE_GPU();
  for (const DType dt : {DType::f32, DType::bf16}) {
    {
      AttnBlock b;
      init_parameters_randn(b, dt, 3, 0.2);
      for (const auto& [name, p] : b.named_parameters()) p->move_to(cudatest::gpu());
      compile::CompiledModule cm(
          [](Module& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<AttnBlock&>(m).forward(in[0])}; },
          reduce_overhead());
      for (int call = 0; call < 5; ++call) {
        const Tensor x = cudatest::random_values({2, 40, 64}, dt, 100 + call, -1.f, 1.f).to(cudatest::gpu());
        const auto want = bits(b.forward(x));
        EXPECT_EQ(bits(cm.run(b, {x})[0]), want) << dtype_name(dt) << " call " << call;
      }
      const compile::DeviceGraphStats s = cm.stats().device_graphs;
      EXPECT_EQ(s.warmups, 1);
      EXPECT_EQ(s.captures, 1) << s.last_refusal;
      EXPECT_EQ(s.replays, 4);
      EXPECT_EQ(s.refused, 0) << s.last_refusal;
      EXPECT_GT(backend::cuda::graph_pool_stats(0).reserved_bytes, 0);
    }
    // The graph is gone: its pool returned every segment.
    EXPECT_EQ(backend::cuda::graph_pool_stats(0).reserved_bytes, 0) << dtype_name(dt);
  }
}

TEST(CudaGraphs, AHostReadBackInTheBlockIsRefusedAndRunsEagerly) {
  DIFFQ_REQUIRE_GPU();
  struct Embeds : Module {
    Embeds() : Module("Embeds") {}
    Tensor forward(const Tensor& ids, const Tensor& table) { return ops::embedding(ids, table); }  // checks ids on the host
  } m;
  compile::CompiledModule cm(
      [](Module& mod, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<Embeds&>(mod).forward(in[0], in[1])}; },
      reduce_overhead());
  const Tensor table = cudatest::random_values({10, 8}, DType::f32, 1).to(cudatest::gpu());
  Tensor ids_host = Tensor::empty({4}, DType::i64);
  for (int i = 0; i < 4; ++i) static_cast<int64_t*>(ids_host.data_ptr())[i] = (i * 3) % 10;
  const Tensor ids = ids_host.to(cudatest::gpu());
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(bits(cm.run(m, {ids, table})[0]), bits(m.forward(ids, table))) << call;
  const compile::DeviceGraphStats s = cm.stats().device_graphs;
  EXPECT_EQ(s.captures, 0);
  EXPECT_EQ(s.refused, 2);
  EXPECT_NE(s.last_refusal.find("cannot be part of a CUDA graph"), std::string::npos) << s.last_refusal;
  // The abandoned capture left no error behind: the next plain op runs.
  EXPECT_EQ(bits(ops::add(table, table)), bits(ops::add(table, table)));
}

}  // namespace
}  // namespace diffq
