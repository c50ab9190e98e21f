// mul_add against the op chains it replaces, bit for bit: torch's (c.float() + a.float() * b.float()).to(dt)
// (Wan's gated residuals) and c + a * b with every tensor in dt (two roundings: FLUX-style bf16 chains).
// A multiply-add contracted into one FMA, a product rounded where it should not be (or not where it
// should), or a wrong broadcast fails here; the op table (op_cases.h) holds it to the f64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

TEST(MulAdd, BadInputsAreErrorsNamingTheOp) {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32), ints = Tensor::zeros({2, 3}, DType::i32);
  auto throws_naming_mul_add = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mul_add"), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error";
  };
  throws_naming_mul_add([&] { ops::mul_add(a, ints, a, DType::f32); });                       // integer operand
  throws_naming_mul_add([&] { ops::mul_add(a, a, a, DType::i32); });                          // integer output
  throws_naming_mul_add([&] { ops::mul_add(a, Tensor::zeros({4}, DType::f32), a, DType::f32); });  // shapes
  throws_naming_mul_add([&] { ops::mul_add(a, a, Tensor::zeros({3, 3}, DType::f32), DType::f32); });
}

}  // namespace
}  // namespace diffq
