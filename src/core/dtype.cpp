#include "diffq/dtype.h"

#include <cmath>
#include <limits>

#include "core/float8_e4m3.h"
#include "diffq/error.h"

namespace diffq {

namespace {
struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view torch_name;
  std::string_view st_name;
  bool floating;
};
constexpr DTypeInfo kInfo[kNumDTypes] = {
    {DType::f32, 4, "float32", "F32", true},
    {DType::f16, 2, "float16", "F16", true},
    {DType::bf16, 2, "bfloat16", "BF16", true},
    {DType::f8_e4m3fn, 1, "float8_e4m3fn", "F8_E4M3", true},
    {DType::f8_e5m2, 1, "float8_e5m2", "F8_E5M2", true},
    {DType::i8, 1, "int8", "I8", false},
    {DType::u8, 1, "uint8", "U8", false},
    {DType::i32, 4, "int32", "I32", false},
    {DType::i64, 8, "int64", "I64", false},
    {DType::boolean, 1, "bool", "BOOL", false},
};
const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).torch_name; }
std::string_view safetensors_dtype_name(DType t) { return info(t).st_name; }
bool is_floating(DType t) { return info(t).floating; }

DType parse_dtype(std::string_view name) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  for (const auto& i : kInfo)
    if (name == i.torch_name || name == i.st_name) return i.type;
  if (name == "float" || name == "fp32") return DType::f32;
  if (name == "half" || name == "fp16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  if (name == "long") return DType::i64;
  if (name == "int") return DType::i32;
  fail("dtype", "unknown dtype '", name, "'");
}

// f16 <-> f32: the branch-free IEEE conversions of the FP16 library that c10::Half uses (RNE).
float f16_to_f32(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized));
  return f32_from_bits(result);
}

uint16_t f32_to_f16(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float f8_e4m3fn_to_f32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int e = (v >> 3) & 0xF, m = v & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(float(m), -9);
  return sign * std::ldexp(1.0f + float(m) / 8.0f, e - 7);
}

// torch 2.15's tensor cast: core/float8_e4m3.h (shared with the CUDA kernels).
uint8_t f32_to_f8_e4m3fn(float f) { return core::f32_to_e4m3fn_bits(f); }

float f8_e5m2_to_f32(uint8_t v) { return f16_to_f32(uint16_t(uint16_t(v) << 8)); }

// torch (c10/util/Float8_e5m2.h): |x| >= 65536 -> inf (NaN stays NaN); otherwise RNE.
uint8_t f32_to_f8_e5m2(float f) {
  uint32_t bits = f32_bits(f);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint8_t result;
  if (bits >= (143u << 23)) {
    result = bits > (255u << 23) ? 0x7F : 0x7C;
  } else if (bits < (113u << 23)) {
    const uint32_t denorm_mask = 134u << 23;
    bits = f32_bits(f32_from_bits(bits) + f32_from_bits(denorm_mask));
    result = uint8_t(bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (bits >> 21) & 1u;
    bits += (uint32_t(15 - 127) << 23) + 0xFFFFFu;
    bits += mant_odd;
    result = uint8_t(bits >> 21);
  }
  return uint8_t(result | (sign >> 24));
}

double load_as_double(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f8_e4m3fn: return f8_e4m3fn_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::f8_e5m2: return f8_e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::i8: return static_cast<const int8_t*>(base)[i];
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return double(static_cast<const int64_t*>(base)[i]);
    case DType::boolean: return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
  }
  return 0;
}

namespace {
// Float -> integer as torch's CPU cast (C++ static_cast; out-of-range is undefined there, we saturate).
template <class I>
I to_int(double v) {
  if (std::isnan(v)) return 0;
  const double lo = double(std::numeric_limits<I>::min()), hi = double(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}
}  // namespace

void store_from_double(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = float(v); return;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16(float(v)); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(float(v)); return;
    case DType::f8_e4m3fn: static_cast<uint8_t*>(base)[i] = f32_to_f8_e4m3fn(float(v)); return;
    case DType::f8_e5m2: static_cast<uint8_t*>(base)[i] = f32_to_f8_e5m2(float(v)); return;
    case DType::i8: static_cast<int8_t*>(base)[i] = to_int<int8_t>(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = to_int<uint8_t>(v); return;
    case DType::i32: static_cast<int32_t*>(base)[i] = to_int<int32_t>(v); return;
    case DType::i64: static_cast<int64_t*>(base)[i] = to_int<int64_t>(v); return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = (v != 0.0) ? 1 : 0; return;
  }
}

}  // namespace diffq
