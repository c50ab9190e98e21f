// Element types and the scalar conversions between them. Conversions round exactly as PyTorch's CPU
// casts do: round-to-nearest-even for f16/bf16/fp8, torch's fp8 overflow rules (e4m3fn: NaN, e5m2: inf),
// truncation toward zero for float -> integer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace diffq {

enum class DType : uint8_t { f32, f16, bf16, f8_e4m3fn, f8_e5m2, i8, u8, i32, i64, boolean };
inline constexpr int kNumDTypes = 10;

inline constexpr DType float32 = DType::f32;
inline constexpr DType float16 = DType::f16;
inline constexpr DType bfloat16 = DType::bf16;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // torch spelling: "float32", "bfloat16", "float8_e4m3fn", ...
bool is_floating(DType t);
// Parses torch ("bfloat16", "torch.float16") and safetensors ("BF16", "F8_E4M3") spellings; throws on others.
DType parse_dtype(std::string_view name);
std::string_view safetensors_dtype_name(DType t);  // "F32", "BF16", "F8_E4M3", "BOOL", ...

// ---- scalar conversions (bit-exact with torch) -------------------------------------------------
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN -> canonical quiet NaN (torch)
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8_e4m3fn_to_f32(uint8_t v);
uint8_t f32_to_f8_e4m3fn(float f);
float f8_e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8_e5m2(float f);

// v rounded to t and back to f32 (the value a tensor of dtype t holds): bf16 and f16 round to nearest
// even (NaN stays NaN); every other dtype leaves v as it is.
inline float round_through(DType t, float v) {
  if (t == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::f16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// Storage types for the 16/8-bit floats, so templates can tell them apart.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };
struct f8e4m3_t { uint8_t bits; };
struct f8e5m2_t { uint8_t bits; };

template <class T> inline float to_f32(T v) { return float(v); }
template <> inline float to_f32(bf16_t v) { return bf16_to_f32(v.bits); }
template <> inline float to_f32(f16_t v) { return f16_to_f32(v.bits); }
template <> inline float to_f32(f8e4m3_t v) { return f8_e4m3fn_to_f32(v.bits); }
template <> inline float to_f32(f8e5m2_t v) { return f8_e5m2_to_f32(v.bits); }

// Reads element i of a buffer of dtype t as double (exact for every dtype except i64 beyond 2^53).
double load_as_double(const void* base, DType t, int64_t i);
// Writes v, rounding as torch's cast from float64 would (float types: via float32 as torch does for
// f16/bf16/fp8 casts from f32 sources; integers: truncate toward zero).
void store_from_double(void* base, DType t, int64_t i, double v);

}  // namespace diffq
