// Reference quantizers of the plain and legacy types (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
// bit-exact with gguf-py 0.19's gguf.quants.quantize and ggml's quantize_row_*_ref: the scale is
// computed and rounded to f16 the same way, and each code from the same f32 operations (no fused
// multiply-add). The first element of largest magnitude sets the sign of the symmetric scales.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "diffq/dtype.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::quant::gguf {

namespace {
// The element of largest magnitude (the first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}
// C's (int8_t)(float) as ggml's x86 build (and numpy's astype) execute it: cvttss2si to int32 (INT32_MIN
// for NaN and out-of-range values), then the low 8 bits. Exact truncation for every in-range value;
// the rest only happens for non-finite scales (e.g. a block of subnormals, where 1/d overflows).
int trunc_i8(float v) {
  const int32_t i = (v > -2147483904.0f && v < 2147483648.0f) ? int32_t(v) : INT32_MIN;
  return int(int8_t(uint8_t(uint32_t(i) & 0xFFu)));
}
void min_max(const float* x, int n, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}
}  // namespace

void quantize_row_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }

void quantize_row_f16(const float* x, void* y, int64_t n) {
  auto* p = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(x[i]);
}

void quantize_row_bf16(const float* x, void* y, int64_t n) {
  auto* p = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = f32_bits(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      p[i] = uint16_t((u >> 16) | 64);  // NaN: keep sign and payload top, force quiet
    } else {
      p[i] = uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
    }
  }
}

void quantize_row_q4_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q4_0*>(vy);
  for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    const float d = signed_absmax(x, QK4_0) / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int q0 = std::min(15, trunc_i8((x[j] * id + 8.5f)));
      const int q1 = std::min(15, trunc_i8((x[j + QK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = uint8_t(uint8_t(q0) | (uint8_t(q1) << 4));  // unmasked, as ggml
    }
  }
}

void quantize_row_q4_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q4_1*>(vy);
  for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
    float min, max;
    min_max(x, QK4_1, min, max);
    const float d = (max - min) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int q0 = std::min(15, trunc_i8(((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, trunc_i8(((x[j + QK4_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = uint8_t(uint8_t(q0) | (uint8_t(q1) << 4));  // unmasked, as ggml
    }
  }
}

void quantize_row_q5_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q5_0*>(vy);
  for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
    const float d = signed_absmax(x, QK5_0) / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int q0 = std::min(31, trunc_i8((x[j] * id + 16.5f)));
      const int q1 = std::min(31, trunc_i8((x[j + QK5_0 / 2] * id + 16.5f)));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q5_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q5_1*>(vy);
  for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
    float min, max;
    min_max(x, QK5_1, min, max);
    const float d = (max - min) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int q0 = std::min(31, trunc_i8(((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(31, trunc_i8(((x[j + QK5_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = int8_t(trunc_i8(std::round(x[j] * id)));  // half away from 0
  }
}

}  // namespace diffq::quant::gguf
