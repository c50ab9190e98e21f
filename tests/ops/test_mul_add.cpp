// mul_add against the op chains it replaces, bit for bit: torch's (c.float() + a.float() * b.float()).to(dt)
// (Wan's gated residuals) and c + a * b with every tensor in dt (two roundings: FLUX-style bf16 chains).
// A multiply-add contracted into one FMA, a product rounded where it should not be (or not where it
// should), or a wrong broadcast fails here; the op table (op_cases.h) holds it to the f64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error_of.h"
#include "core/random.h"
#include "diffq/error.h"
#include "expect_bits.h"
#include "ops/ops.h"

namespace diffq {
namespace {

// [1, N, D] operands with a [1, 1, D] float32 gate (Wan's shapes), D odd and wider than the kernel's chunk
// so the vector tails and several chunks per row run; infinities and a NaN among the values.
struct Operands {
  Tensor gate, o, h;
};
Operands operands(DType dt, int64_t N, int64_t D) {
  Generator g(5);
  Operands x;
  x.gate = randn_tensor({1, 1, D}, g, DType::f32);
  x.o = ops::mul_scalar(randn_tensor({1, N, D}, g, DType::f32), 3.0).to(dt);
  x.h = ops::mul_scalar(randn_tensor({1, N, D}, g, DType::f32), 5.0).to(dt);
  Tensor hv = x.h.contiguous();
  const float specials[] = {INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 3; ++i) {
    const Tensor v = Tensor::full({1}, specials[i], DType::f32).to(dt);
    std::memcpy(static_cast<char*>(hv.data_ptr()) + size_t(7 + 11 * i) * dtype_size(dt), v.data_ptr(), dtype_size(dt));
  }
  x.h = hv;
  return x;
}

TEST(MulAdd, EqualsTheFloat32ChainBitwise) {
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const int64_t D : {int64_t(37), int64_t(2500)}) {
      const Operands x = operands(dt, 13, D);
      const Tensor chain = ops::add(x.h.to(DType::f32), ops::mul(x.o.to(DType::f32), x.gate)).to(dt);
      expect_bits_equal(ops::mul_add(x.gate, x.o, x.h, dt), chain,
                        std::string("f32 chain into ") + std::string(dtype_name(dt)) + ", D " + std::to_string(D));
    }
}

TEST(MulAdd, RoundedProductEqualsTheTwoOpsInTheirDtype) {
  for (const DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const int64_t D : {int64_t(37), int64_t(2500)}) {
      const Operands x = operands(dt, 13, D);
      const Tensor gate = x.gate.to(dt);
      const Tensor chain = ops::add(x.h, ops::mul(gate, x.o));  // each op rounds to dt
      expect_bits_equal(ops::mul_add(gate, x.o, x.h, dt, /*round_product=*/true), chain,
                        std::string("two ops in ") + std::string(dtype_name(dt)) + ", D " + std::to_string(D));
    }
  // Without the product's rounding bf16 differs somewhere (the test above would pass a kernel that
  // ignored the flag otherwise).
  const Operands x = operands(DType::bf16, 13, 37);
  const Tensor gate = x.gate.to(DType::bf16);
  const Tensor once = ops::mul_add(gate, x.o, x.h, DType::bf16).to(DType::f32);
  const Tensor twice = ops::mul_add(gate, x.o, x.h, DType::bf16, true).to(DType::f32);
  const Tensor diff = ops::sub(once, twice).contiguous();
  int64_t differs = 0;
  for (int64_t i = 0; i < diff.numel(); ++i) differs += diff.data<float>()[i] != 0.0f && !std::isnan(diff.data<float>()[i]);
  EXPECT_GT(differs, 0);
}

// bf16 operands whose rows the kernel reads as bf16 directly (unit-stride or broadcast within a row): a scalar,
// a row broadcast over the sequence and views at an offset, against the f32 ops they stand for; an operand of
// another stride (a transposed view) goes the general way and agrees as well.
TEST(MulAdd, Bf16RowsReadInPlaceEqualTheF32Chain) {
  const Operands x = operands(DType::bf16, 13, 2500);
  const Tensor scale = x.gate.to(DType::bf16), scalar = Tensor::full({1}, 0.8125, DType::bf16);
  const Tensor o = x.o.slice(1, 3, 13), h = x.h.slice(1, 2, 12);  // [1, 10, D] at offsets of 3 and 2 rows
  const auto chain = [](const Tensor& a, const Tensor& b, const Tensor& c, bool round_product) {
    Tensor p = ops::mul(a.to(DType::f32), b.to(DType::f32));
    if (round_product) p = p.to(DType::bf16).to(DType::f32);
    return ops::add(p, c.to(DType::f32)).to(DType::bf16);
  };
  for (const bool rp : {false, true}) {
    const std::string tag = rp ? " (product rounded)" : "";
    expect_bits_equal(ops::mul_add(o, scale, h, DType::bf16, rp), chain(o, scale, h, rp), "row broadcast" + tag);
    expect_bits_equal(ops::mul_add(scale, o, scale, DType::bf16, rp), chain(scale, o, scale, rp),
                      "row broadcast as a and c" + tag);
    expect_bits_equal(ops::mul_add(scalar, o, h, DType::bf16, rp), chain(scalar, o, h, rp), "scalar" + tag);
    const Tensor ot = x.o.slice(2, 0, 13).transpose(1, 2);  // [1, 13, 13], stride D within a row
    const Tensor ht = x.h.slice(2, 0, 13);
    expect_bits_equal(ops::mul_add(ot, scalar, ht, DType::bf16, rp), chain(ot, scalar, ht, rp), "strided" + tag);
  }
}

TEST(MulAdd, BadInputsAreErrorsNamingTheOp) {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32), ints = Tensor::zeros({2, 3}, DType::i32);
  const auto throws_naming_mul_add = [](const std::function<void()>& f) {
    EXPECT_NE(testing::error_of(f).find("mul_add"), std::string::npos) << testing::error_of(f);
  };
  throws_naming_mul_add([&] { ops::mul_add(a, ints, a, DType::f32); });                       // integer operand
  throws_naming_mul_add([&] { ops::mul_add(a, a, a, DType::i32); });                          // integer output
  throws_naming_mul_add([&] { ops::mul_add(a, Tensor::zeros({4}, DType::f32), a, DType::f32); });  // shapes
  throws_naming_mul_add([&] { ops::mul_add(a, a, Tensor::zeros({3, 3}, DType::f32), DType::f32); });
}

}  // namespace
}  // namespace diffq
