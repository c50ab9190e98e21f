// A Linear's dense bf16 weight packed for its device's GEMM at its first bf16 forward (modules/parameter.h,
// ops/weight_packing.h; forced on with the CPU tuning's WeightPacking::on): the output keeps the dense
// linear's bits, the packed copy replaces the dense one, readers of dense() get the exact weight back
// and it then stays dense, set() allows packing again, moves and offload groups keep it dense, and
// traced (symbolic) calls never pack. Skips where this CPU's oneDNN reads no packed bf16 weights.
#include <gtest/gtest.h>


#include "backend/cpu/onednn_gemm.h"
#include "common/random_tensor.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/tuning.h"
#include "modules/layers.h"
#include "offload/param_group.h"
#include "ops/linear_q.h"
#include "ops/ops.h"
#include "ops/trace.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

using diffq::testing::randn;
const auto bits = diffq::testing::bits16;

class PackedParameter : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::onednn_bf16_packing_usable()) GTEST_SKIP() << "oneDNN reads no packed bf16 weights here: " << cpu::onednn_bf16_impl();
    cpu::Tuning t = cpu::current_tuning();
    t.weight_packing = cpu::WeightPacking::on;
    t.gemm_kernel = cpu::GemmKernel::onednn;
    scope_ = std::make_unique<cpu::ScopedTuning>(t);
    lin.weight.set(w, Residency::host);
    lin.bias.set(b, Residency::host);
  }
  std::unique_ptr<cpu::ScopedTuning> scope_;
  Linear lin{96, 130};
  Tensor w = randn({130, 96}, 1, DType::bf16), b = randn({130}, 2, DType::bf16);
  Tensor x = randn({3, 20, 96}, 3, DType::bf16);
};

TEST_F(PackedParameter, FirstForwardPacksAndKeepsTheBits) {
  // The packed linear's bits (tests/ops/test_packed_linear_weight.cpp: those of the dense linear).
  const std::vector<uint16_t> want = bits(ops::linear_q(x, cpu::PackedBf16Weight(w), b));
  EXPECT_FALSE(lin.weight.is_packed());
  EXPECT_EQ(bits(lin(x)), want);
  ASSERT_TRUE(lin.weight.is_packed());
  EXPECT_FALSE(lin.weight.is_quantized());
  EXPECT_EQ(lin.weight.dtype(), DType::bf16);
  EXPECT_GE(lin.weight.nbytes(), w.nbytes());
  EXPECT_EQ(bits(lin(x)), want);  // the packed path
  EXPECT_TRUE(lin.weight.is_packed());
}

TEST_F(PackedParameter, DenseUnpacksExactlyAndStaysDense) {
  lin(x);
  ASSERT_TRUE(lin.weight.is_packed());
  EXPECT_EQ(bits(lin.weight.dense()), bits(w));
  EXPECT_FALSE(lin.weight.is_packed());
  EXPECT_EQ(bits(lin(x)), bits(ops::linear(x, w, b)));  // the dense linear now
  EXPECT_FALSE(lin.weight.is_packed()) << "a weight read densely must not be packed again";
  // A new value may be packed again.
  const Tensor w2 = randn({130, 96}, 4, DType::bf16);
  lin.weight.set(w2, Residency::host);
  EXPECT_EQ(bits(lin(x)), bits(ops::linear_q(x, cpu::PackedBf16Weight(w2), b)));
  EXPECT_TRUE(lin.weight.is_packed());
}

TEST_F(PackedParameter, OtherInputsAndMovesUseTheDenseWeight) {
  lin(x);
  ASSERT_TRUE(lin.weight.is_packed());
  const Tensor xf = x.to(DType::f32);
  const Tensor y = lin(xf);  // an f32 input: the dense linear (promoted to f32), the weight unpacked for good
  EXPECT_EQ(y.dtype(), ops::linear(xf, w, b).dtype());
  EXPECT_FALSE(lin.weight.is_packed());

  Linear other(96, 130);
  other.weight.set(w, Residency::host);
  other.bias.set(b, Residency::host);
  other(x);
  ASSERT_TRUE(other.weight.is_packed());
  other.weight.move_to(Device::cpu());
  EXPECT_FALSE(other.weight.is_packed());
  EXPECT_EQ(bits(other.weight.dense()), bits(w));
}

TEST_F(PackedParameter, OffloadGroupsAndTracingKeepItDense) {
  offload::ParamGroup group("g", {&lin}, {{"weight", &lin.weight}});
  lin(x);
  EXPECT_FALSE(lin.weight.is_packed()) << "an offload group's parameter is moved by the group: kept dense";

  Linear traced(96, 130);
  traced.weight.set(w, Residency::host);
  traced.bias.set(b, Residency::host);
  ops::Trace trace;
  const Tensor sx = trace.input(x.shape(), x.dtype());
  trace.finish({traced(sx)});
  EXPECT_FALSE(traced.weight.is_packed()) << "a traced call packs nothing";
}

TEST(PackedParameterOff, NothingPacksWhenOff) {
  cpu::Tuning t = cpu::current_tuning();
  t.weight_packing = cpu::WeightPacking::off;
  const cpu::ScopedTuning scope(t);
  Linear lin(96, 130);
  lin.weight.set(randn({130, 96}, 1, DType::bf16), Residency::host);
  lin.bias.set(randn({130}, 2, DType::bf16), Residency::host);
  lin(randn({4, 96}, 3, DType::bf16));
  EXPECT_FALSE(lin.weight.is_packed());
}

}  // namespace
