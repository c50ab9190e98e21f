// The CPU's bf16 binary fast path (unit-stride bf16 rows widened and rounded in registers, elementwise.cpp
// BinaryBf16) against the same op on float32 copies rounded to bf16 afterwards (the f32 path's
// arithmetic, then the cast's round to nearest even), bit for bit: every BinaryFn, rows with vector
// tails, several chunks per row, NaN, infinities, signed zeros and values whose sums round to a tie.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "core/random.h"
#include "expect_bits.h"
#include "ops/ops.h"

namespace diffq {
namespace {

Tensor operand(Generator& g, const Shape& s, double scale) {
  Tensor t = ops::mul_scalar(randn_tensor(s, g, DType::f32), scale).to(DType::bf16).contiguous();
  auto* p = static_cast<uint16_t*>(t.data_ptr());
  const uint16_t specials[] = {0x7fc0, 0x7f80, 0xff80, 0x0000, 0x8000, 0x3f80, 0x3f81, 0x0001};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) p[i * 37] = specials[i];
  return t;
}

TEST(BinaryBf16, EqualsTheFloat32OpRoundedBitwise) {
  Generator g(3);
  // 4099 columns: rows longer than the kernel's 4096-element chunks, with a vector tail.
  const Shape shape{3, 4099};
  const Tensor a = operand(g, shape, 3.0), b = operand(g, shape, 2.0);
  const std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>> fns[] = {
      {"add", ops::add},         {"sub", ops::sub},         {"mul", ops::mul},
      {"div", ops::div},         {"maximum", ops::maximum}, {"minimum", ops::minimum}};
  for (const auto& [name, fn] : fns) {
    const Tensor fast = fn(a, b);
    const Tensor want = fn(a.to(DType::f32), b.to(DType::f32)).to(DType::bf16);
    expect_bits_equal(fast, want, name);
  }
}

}  // namespace
}  // namespace diffq
