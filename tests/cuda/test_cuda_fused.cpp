// compile's fused elementwise kernel on CUDA (backend/cuda/compile/fused_kernel.cu): a program with
// broadcast, strided and bf16 leaves against the scalar reference (compile/fused_reference.h) and, bit
// for bit, against the eager CUDA ops it was fused from; a program past the kernel's limits runs op by
// op with the same bits; a module compiled on CUDA fuses its chains and gives the eager bits. Skips
// without a GPU.
#include <gtest/gtest.h>

#include "backend/cuda/compile/fused_kernel.h"
#include "compile/compile_test_util.h"
#include "compile/compiled_module.h"
#include "compile/fused_reference.h"
#include "gpu_test.h"
#include "modules/layers.h"
#include "modules/random_init.h"
#include "ops/ops.h"

namespace diffq {
namespace {

using compile::FusedProgram;
using compile::Instr;

std::vector<uint8_t> bits(const Tensor& t) { return cudatest::bytes_of(t.to(Device::cpu())); }

double max_rel(const Tensor& a, const Tensor& b) {
  const auto x = a.to(Device::cpu()).to_f64_vector(), y = b.to(Device::cpu()).to_f64_vector();
  double m = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i])), s = std::max(s, std::fabs(y[i]));
  return s > 0 ? m / s : m;
}

FusedProgram program(DType dt) { return compile_test::sample_fused_program(dt); }

Tensor eager(const Tensor& a, const Tensor& b, const Tensor& c) {
  const Tensor s = ops::add(ops::mul(a, b), ops::silu(c).expand(a.shape()));
  return ops::rsub_scalar(ops::sub(s, ops::clamp(ops::gelu(a, true), -0.5, 0.5)), 3.0);
}

TEST(CudaFused, ProgramMatchesTheReferenceAndTheEagerOpsBits) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor a = cudatest::random_values({3, 37, 130}, dt, 1, -3.f, 3.f).to(cudatest::gpu());
    const Tensor b = cudatest::random_values({37, 1}, dt, 2, -3.f, 3.f).to(cudatest::gpu());
    const Tensor c = cudatest::random_values({130}, dt, 3, -3.f, 3.f).to(cudatest::gpu());
    Tensor out = Tensor::empty({3, 37, 130}, dt, cudatest::gpu());
    backend::cuda::run_fused(program(dt), {a, b, c}, out);
    Tensor ref = Tensor::empty({3, 37, 130}, dt);
    compile::run_fused_reference(program(dt), {a.to(Device::cpu()), b.to(Device::cpu()), c.to(Device::cpu())}, ref);
    EXPECT_LE(max_rel(out, ref), dt == DType::f32 ? 1e-5 : 8e-3);
    EXPECT_EQ(bits(out), bits(eager(a, b, c)));
    // A transposed leaf.
    const Tensor at = cudatest::random_values({130, 37}, dt, 4, -3.f, 3.f).to(cudatest::gpu()).transpose(0, 1);
    Tensor o2 = Tensor::empty({37, 130}, dt, cudatest::gpu());
    backend::cuda::run_fused(program(dt), {at, b, c}, o2);
    EXPECT_EQ(bits(o2), bits(eager(at, b, c)));
  }
}

TEST(CudaFused, AProgramPastTheKernelsLimitsRunsOpByOpWithTheSameBits) {
  DIFFQ_REQUIRE_GPU();
  FusedProgram p;
  p.code.push_back({Instr::Op::load, 0});
  for (int k = 0; k < backend::cuda::kMaxFusedInstrs + 6; ++k)
    p.code.push_back({Instr::Op::scalar, int32_t(p.code.size() - 1), -1, int64_t(ops::ScalarFn::mul), 1.01f});
  const Tensor a = cudatest::random_values({5, 64}, DType::bf16, 7).to(cudatest::gpu());
  for (Instr& in : p.code) in.dtype = DType::bf16;
  Tensor out = Tensor::empty({5, 64}, DType::bf16, cudatest::gpu());
  backend::cuda::run_fused(p, {a}, out);
  Tensor want = a;
  for (int k = 0; k < backend::cuda::kMaxFusedInstrs + 6; ++k) want = ops::mul_scalar(want, 1.01f);
  EXPECT_EQ(bits(out), bits(want));
}

struct Mlp : Module {
  Mlp() : Module("Mlp"), fc(32, 32) { register_module("fc", fc); }
  Tensor forward(const Tensor& x) { return ops::add(ops::mul(ops::silu(fc(x)), ops::add_scalar(x, 1.0)), x); }
  Linear fc;
};

TEST(CudaFused, ACompiledModuleFusesItsChainsWithTheEagerBits) {
  DIFFQ_REQUIRE_GPU();
  Mlp m;
  init_parameters_randn(m, DType::bf16, 5, 0.2);
  for (const auto& [name, p] : m.named_parameters()) p->move_to(cudatest::gpu());
  compile::CompiledModule cm([](Module& mod, const std::vector<Tensor>& in) { return std::vector<Tensor>{static_cast<Mlp&>(mod).forward(in[0])}; },
                             {});
  const Tensor x = cudatest::random_values({4, 9, 32}, DType::bf16, 6, -2.f, 2.f).to(cudatest::gpu());
  EXPECT_EQ(bits(cm.run(m, {x})[0]), bits(m.forward(x)));
  const auto g = cm.graph_for(m, {x});
  ASSERT_NE(g, nullptr);
  EXPECT_GT(g->graph.count(compile::Node::Kind::fused), 0);
}

}  // namespace
}  // namespace diffq
