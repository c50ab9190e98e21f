#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "diffq/dtype.h"
#include "diffq/error.h"

using namespace diffq;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("torch.bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::f8_e4m3fn);
  EXPECT_EQ(safetensors_dtype_name(DType::f8_e5m2), "F8_E5M2");
  EXPECT_THROW(parse_dtype("complex64"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd mantissa) and 1.015625: ties to even -> up
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

TEST(DType, F16RoundTripAndOverflow) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
}

TEST(DType, Fp8RoundTripAndSaturation) {
  for (int v = 0; v < 256; ++v) {
    const float a = f8_e4m3fn_to_f32(uint8_t(v));
    if (!std::isnan(a)) {
      EXPECT_EQ(f32_to_f8_e4m3fn(a), v) << v;
    }
    const float b = f8_e5m2_to_f32(uint8_t(v));
    if (!std::isnan(b)) {
      EXPECT_EQ(f32_to_f8_e5m2(b), v) << v;
    }
  }
  EXPECT_EQ(f8_e4m3fn_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f32_to_f8_e4m3fn(463.9f), 0x7e);  // rounds to 448
  EXPECT_EQ(f32_to_f8_e4m3fn(480.0f), 0x7e);  // torch 2.15 saturates to 448
  EXPECT_EQ(f32_to_f8_e4m3fn(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8_e4m3fn(NAN), 0x7f);
  EXPECT_EQ(f32_to_f8_e5m2(1e6f), 0x7c);      // inf
  EXPECT_EQ(f32_to_f8_e4m3fn(-0x1p-9f), 0x81);  // smallest subnormal
}
