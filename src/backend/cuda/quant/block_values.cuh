// One weight of a packed quantized weight (GGUF blocks, bitsandbytes 4-bit, torchao int4, quanto, SDNQ, AutoRound, the BFL / ModelOpt scaled layouts), element by element, as the CUDA dequantization kernels compute it
// (one thread per element: coalesced writes of the dequantized weight). Callable from the host too:
// tests/cuda/test_cuda_block_values.cpp checks every element of every block type against the scalar
// reference dequantizers (src/quant) on a machine without a GPU. Each value is formed by the reference's
// float operations in its order (the *_rn helpers keep nvcc from contracting them into FMAs; the host
// test turns contraction off), so the bits are the reference's.
#pragma once

#include <cstdint>

#include "backend/cuda/strided.cuh"  // DIFFQ_HOST_DEVICE
#include "diffq/dtype.h"
#ifdef __CUDACC__
#include "backend/cuda/convert.cuh"
#endif

namespace diffq::backend::cuda::blockq {

DIFFQ_HOST_DEVICE float mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DIFFQ_HOST_DEVICE float add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DIFFQ_HOST_DEVICE float sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DIFFQ_HOST_DEVICE float from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return f32_from_bits(u);
#endif
}
// IEEE half bits -> f32 exactly as the host's f16_to_f32.
DIFFQ_HOST_DEVICE float half(const uint8_t* p) {
  const uint16_t h = uint16_t(p[0] | (p[1] << 8));
#ifdef __CUDA_ARCH__
  return f16_bits_to_f32(h);
#else
  return f16_to_f32(h);
#endif
}

// A stored f32 / bf16 / f16 value.
DIFFQ_HOST_DEVICE float load_value(const void* p, DType t, int64_t i) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == DType::bf16) return from_bits(uint32_t(h) << 16);
  return half(reinterpret_cast<const uint8_t*>(&h));
}
// v rounded to t and back (round_through).
DIFFQ_HOST_DEVICE float round_to(DType t, float v) {
#ifdef __CUDA_ARCH__
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
#else
  return round_through(t, v);
#endif
}

// ---- GGUF (ggml) blocks: byte offsets as in src/quant/gguf/blocks.h ---------------------------------

// The ggml type ids this header decodes (src/quant/gguf/gguf_quants.h GGMLType).
enum GgufType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11,
  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20, kIQ4_XS = 23, kBF16 = 30,
};

DIFFQ_HOST_DEVICE int iq4nl_value(int nibble) {
  constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return kv[nibble];
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
DIFFQ_HOST_DEVICE void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element e (0 <= e < block size) of the block at b.
DIFFQ_HOST_DEVICE float gguf_value(uint32_t type, const uint8_t* b, int e) {
  switch (type) {
    case kF32: {
      const uint32_t u = uint32_t(b[4 * e]) | uint32_t(b[4 * e + 1]) << 8 | uint32_t(b[4 * e + 2]) << 16 |
                         uint32_t(b[4 * e + 3]) << 24;
      return from_bits(u);
    }
    case kF16: return half(b + 2 * e);
    case kBF16: return from_bits(uint32_t(b[2 * e] | (b[2 * e + 1] << 8)) << 16);
    case kQ4_0: {  // d, qs[16]: element j low nibble of qs[j], j + 16 the high one
      const int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
      return mul(half(b), float(q - 8));
    }
    case kQ4_1: {  // d, m, qs[16]
      const int q = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
      return add(mul(half(b), float(q)), half(b + 2));
    }
    case kQ5_0: {  // d, qh[4], qs[16]: bit e of qh is bit 4 of element e
      const uint32_t qh = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
      const int q = (e < 16 ? (b[6 + e] & 0xF) : (b[6 + e - 16] >> 4)) | int((qh >> e) & 1) << 4;
      return mul(half(b), float(q - 16));
    }
    case kQ5_1: {  // d, m, qh[4], qs[16]
      const uint32_t qh = uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
      const int q = (e < 16 ? (b[8 + e] & 0xF) : (b[8 + e - 16] >> 4)) | int((qh >> e) & 1) << 4;
      return add(mul(half(b), float(q)), half(b + 2));
    }
    case kQ8_0: return mul(float(int8_t(b[2 + e])), half(b));  // d, qs[32]
    case kQ2_K: {  // scales[16], qs[64], d, dmin
      const int hf = e / 128, r = e % 128, shift = (r / 32) * 2, part = (r % 32) / 16, l = r % 16;
      const int sc = b[hf * 8 + (r / 32) * 2 + part];
      const float dl = mul(half(b + 80), float(sc & 0xF)), ml = mul(half(b + 82), float(sc >> 4));
      return sub(mul(dl, float((b[16 + hf * 32 + l + 16 * part] >> shift) & 3)), ml);
    }
    case kQ3_K: {  // hmask[32], qs[64], scales[12], d
      const int hf = e / 128, r = e % 128, si = r / 32, part = (r % 32) / 16, l = 16 * part + r % 16;
      const int j = hf * 8 + si * 2 + part;  // sub-block
      const uint8_t* s = b + 96;
      const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4), hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      const float dl = mul(half(b + 108), float((lo | (hi << 4)) - 32));
      const int v = int((b[32 + hf * 32 + l] >> (2 * si)) & 3) - (((b[l] >> (hf * 4 + si)) & 1) ? 0 : 4);
      return mul(dl, float(v));
    }
    case kQ4_K:    // d, dmin, scales[12], qs[128]
    case kQ5_K: {  // d, dmin, scales[12], qh[32], qs[128]
      const int jp = e / 64, high = (e % 64) / 32, l = e % 32, j = 2 * jp + high;
      int sc, m;
      scale_min_k4(j, b + 4, sc, m);
      const float d1 = mul(half(b), float(sc)), m1 = mul(half(b + 2), float(m));
      const uint8_t* qs = b + (type == kQ4_K ? 16 : 48);
      int q = high ? (qs[jp * 32 + l] >> 4) : (qs[jp * 32 + l] & 0xF);
      if (type == kQ5_K) q |= ((b[16 + l] >> j) & 1) << 4;
      return sub(mul(d1, float(q)), m1);
    }
    case kQ6_K: {  // ql[128], qh[64], scales[16] (int8), d
      const int hf = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const uint8_t* ql = b + hf * 64;
      const uint8_t qh = b[128 + hf * 32 + l];
      const int lo = quarter == 0 ? (ql[l] & 0xF) : quarter == 1 ? (ql[l + 32] & 0xF) : quarter == 2 ? (ql[l] >> 4)
                                                                                                     : (ql[l + 32] >> 4);
      const int q = (lo | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
      const int8_t sc = int8_t(b[192 + hf * 8 + l / 16 + 2 * quarter]);
      return mul(mul(half(b + 208), float(sc)), float(q));
    }
    case kIQ4_NL: {  // d, qs[16]
      const int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
      return mul(half(b), float(iq4nl_value(q)));
    }
    case kIQ4_XS: {  // d, scales_h (u16), scales_l[4], qs[128]
      const int ib = e / 32, j = e % 32;
      const int scales_h = b[2] | (b[3] << 8);
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = mul(half(b), float(ls - 32));
      const uint8_t q = b[8 + ib * 16 + (j % 16)];
      return mul(dl, float(iq4nl_value(j < 16 ? (q & 0xF) : (q >> 4))));
    }
    default: return 0.0f;  // not decodable here: the host side refuses such a type before launching
  }
}

// Whether gguf_value decodes `type`.
DIFFQ_HOST_DEVICE bool gguf_type_decodable(uint32_t type) {
  switch (type) {
    case kF32: case kF16: case kBF16: case kQ4_0: case kQ4_1: case kQ5_0: case kQ5_1: case kQ8_0: case kQ2_K:
    case kQ3_K: case kQ4_K: case kQ5_K: case kQ6_K: case kIQ4_NL: case kIQ4_XS: return true;
    default: return false;
  }
}

// ---- bitsandbytes 4-bit (NF4 / FP4) ---------------------------------------------------------------

// The code book and block statistics of a bnb 4-bit weight (src/quant/bnb/bnb_4bit.h Bnb4bitState).
struct Bnb4Params {
  float code[16];            // the weight's table (FP4's sign of zero as its path has it)
  int64_t blocksize = 64;
  bool nested = false;       // absmax is uint8 codes of nested_quant_map x nested_absmax + offset
  int64_t nested_blocksize = 256;
  float nested_offset = 0.0f;
};

// Flat element i of the weight: code[nibble] * absmax of its block; element 2t is the high nibble of byte
// t. absmax: f32 per block, or (nested) uint8 codes dequantized as dequantize_blockwise + offset in f32.
DIFFQ_HOST_DEVICE float bnb4_value(const Bnb4Params& p, const uint8_t* packed, const void* absmax,
                                   const float* nested_absmax, const float* nested_map, int64_t i) {
  const uint8_t byte = packed[i / 2];
  const float c = p.code[(i & 1) ? (byte & 0xF) : (byte >> 4)];
  const int64_t blk = i / p.blocksize;
  float am;
  if (p.nested)
    am = add(mul(nested_map[static_cast<const uint8_t*>(absmax)[blk]], nested_absmax[blk / p.nested_blocksize]),
             p.nested_offset);
  else
    am = static_cast<const float*>(absmax)[blk];
  return mul(c, am);
}

// ---- torchao Int4Tensor (Int4WeightOnlyConfig, plain packing) ---------------------------------------

// W[n, k] of a [N, K] weight: qdata [N, K/2] with column 2j in the low nibble (signed 4-bit), scale and
// zero_point [K/g, N] in sdt: q * scale + zero in f32 (src/quant/torchao/int4_weight.h).
DIFFQ_HOST_DEVICE float torchao_int4_value(const uint8_t* q, const void* scale, const void* zero, DType sdt, int64_t N,
                                           int64_t K, int64_t g, int64_t n, int64_t k) {
  const uint8_t b = q[n * (K / 2) + k / 2];
  const int v = (k % 2 == 0) ? int(int8_t(uint8_t(b << 4))) >> 4 : int(int8_t(b)) >> 4;
  const int64_t si = (k / g) * N + n;
  return add(mul(float(v), load_value(scale, sdt, si)), load_value(zero, sdt, si));
}

// ---- quanto (QBytesTensor / WeightQBitsTensor) -----------------------------------------------------

struct QuantoParams {
  int bits = 8;              // 8: int8 or float8 (per-row scale), 4 / 2: packed groups with scale and shift
  bool float8 = false;       // float8_e4m3fn codes (bits 8)
  DType dtype = DType::f32;  // the weight dtype every step rounds to
  int64_t in_features = 0;
  int64_t group_cols = 0, packed_rows = 0;  // int4 / int2: columns per group, rows of the packed codes
  bool scalar_scale = false, scalar_shift = false;  // one element for the whole weight
};

// W[n, c] of quanto's dequantize() in its dtype (src/quant/quanto/quanto.cpp dequant_rows), before the
// linear's own rounding. f8: the 256 float8_e4m3fn values (float8 only).
DIFFQ_HOST_DEVICE float quanto_value(const QuantoParams& p, const uint8_t* data, const void* scale, const void* shift,
                                     const float* f8, int64_t n, int64_t c) {
  if (p.bits == 8) {
    const uint8_t b = data[n * p.in_features + c];
    const float q = p.float8 ? f8[b] : float(int8_t(b));
    return round_to(p.dtype, mul(load_value(scale, p.dtype, p.scalar_scale ? 0 : n), q));
  }
  const int64_t gpr = p.in_features / p.group_cols, gi = n * gpr + c / p.group_cols;
  const uint8_t* row = data + (gi % p.packed_rows) * p.group_cols;
  const int sh = p.bits * int(gi / p.packed_rows), mask = (1 << p.bits) - 1;
  const float v = round_to(p.dtype, mul(load_value(scale, p.dtype, p.scalar_scale ? 0 : gi),
                                        float((row[c % p.group_cols] >> sh) & mask)));
  return round_to(p.dtype, sub(v, load_value(shift, p.dtype, p.scalar_shift ? 0 : gi)));
}

// ---- SDNQ (sdnq 0.2.8 weights: int / uint / float8 codes, packed below 8 bits) --------------------------

struct SdnqParams {
  int bits = 8;
  int min = 0;                  // the dtype's smallest code (signed packed codes are stored minus it)
  bool is_unsigned = false;     // zp + q * scale
  bool is_packed = false;       // bits < 8: 8 / bits codes per byte, the first in the low bits
  int storage = 0;              // 0: int8, 1: uint8, 2: float8 (f8 table)
  DType scale_dtype = DType::f32;
  int64_t in_features = 0, groups = 0;  // groups per row; 0: one scale for the whole tensor
};

// W[n, c] in the scale's dtype (src/quant/sdnq/sdnq_weight.cpp dequant_rows, before the rounding to the
// compute dtype).
DIFFQ_HOST_DEVICE float sdnq_value(const SdnqParams& p, const uint8_t* w, const void* scale, const void* zero,
                                   const float* f8, int64_t n, int64_t c) {
  const int64_t i = n * p.in_features + c;
  float q;
  if (p.is_packed) {
    const int per = 8 / p.bits;
    const int v = (w[i / per] >> ((i % per) * p.bits)) & ((1 << p.bits) - 1);
    q = float(p.is_unsigned ? v : v + p.min);
  } else {
    q = p.storage == 0 ? float(int8_t(w[i])) : p.storage == 1 ? float(w[i]) : f8[w[i]];
  }
  const int64_t si = p.groups ? n * p.groups + c / (p.in_features / p.groups) : 0;
  float v = round_to(p.scale_dtype, mul(q, load_value(scale, p.scale_dtype, si)));
  if (p.is_unsigned) v = round_to(p.scale_dtype, add(load_value(zero, p.scale_dtype, si), v));
  return v;
}

// ---- AutoRound (GPTQ-style packed int32 words) -----------------------------------------------------

struct AutoRoundParams {
  int bits = 4;
  bool zero_minus_one = true;  // "gptq" packings store zp - 1
  int64_t N = 0, K = 0, group_size = 0;  // group_size: columns per group when there is no g_idx
  int g_idx = 0;               // 0: none, 4: int32 [K], 8: int64 [K]
  DType scale_dtype = DType::f16;
};

// W[n, k] = round(compute, round(compute, scale[g, n]) * (q - zp)) (autoround_weight.cpp dequant_rows).
DIFFQ_HOST_DEVICE float autoround_value(const AutoRoundParams& p, const uint32_t* qweight, const uint32_t* qzeros,
                                        const void* scales, const void* g_idx, DType compute, int64_t n, int64_t k) {
  const int per = 32 / p.bits;
  const uint32_t mask = (1u << p.bits) - 1;
  const int32_t q = int32_t((qweight[(k / per) * p.N + n] >> ((k % per) * p.bits)) & mask);
  const int64_t g = p.g_idx == 0 ? k / p.group_size
                    : p.g_idx == 4 ? int64_t(static_cast<const int32_t*>(g_idx)[k])
                                   : static_cast<const int64_t*>(g_idx)[k];
  const int32_t z = int32_t((qzeros[g * (p.N / per) + n / per] >> ((n % per) * p.bits)) & mask) +
                    (p.zero_minus_one ? 1 : 0);
  return round_to(compute, mul(round_to(compute, load_value(scales, p.scale_dtype, g * p.N + n)), float(q - z)));
}

// ---- BFL / ModelOpt "codes times scales" layouts (src/quant/bfl/scaled_weight.h) ---------------------

enum ScaledKind : int { kScaledFp8 = 0, kScaledNvfp4 = 1, kScaledInt4Awq = 2, kScaledInt8Channel = 3 };

struct ScaledParams {
  int kind = kScaledFp8;
  int64_t K = 0;
  bool per_row = false;         // fp8: one scale per row (else one for the tensor)
  int64_t group = 0;            // int4 AWQ: columns per scale
  DType scale_dtype = DType::f32;  // int4 AWQ's weight_scale dtype (the others are f32 / float8)
  float global_scale = 1.0f;    // nvfp4: weight_scale_2
};

DIFFQ_HOST_DEVICE float e2m1_value(int code) {
  constexpr float kv[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kv[code & 0x0f];
}

// W[n, c] in float32 as the scheme's dequant_rows_f32 forms it. q: the codes; scale: the (block) scales;
// f8: the float8_e4m3fn table (fp8 codes, nvfp4 block scales).
DIFFQ_HOST_DEVICE float scaled_value(const ScaledParams& p, const uint8_t* q, const void* scale, const float* f8,
                                     int64_t n, int64_t c) {
  switch (p.kind) {
    case kScaledFp8: return mul(f8[q[n * p.K + c]], static_cast<const float*>(scale)[p.per_row ? n : 0]);
    case kScaledNvfp4: {  // two E2M1 codes per byte (even element low), a float8 scale per 16 along K
      const float s = mul(f8[static_cast<const uint8_t*>(scale)[n * (p.K / 16) + c / 16]], p.global_scale);
      const uint8_t b = q[n * (p.K / 2) + c / 2];
      return mul(e2m1_value((c & 1) ? (b >> 4) : (b & 0x0f)), s);
    }
    case kScaledInt4Awq: {  // two rows per byte (row 2i low nibble), signed
      int v = (q[(n / 2) * p.K + c] >> ((n & 1) ? 4 : 0)) & 0x0f;
      if (v >= 8) v -= 16;
      return mul(float(v), load_value(scale, p.scale_dtype, n * (p.K / p.group) + c / p.group));
    }
    default: return mul(float(int8_t(q[n * p.K + c])), static_cast<const float*>(scale)[n]);  // int8 channel
  }
}

}  // namespace diffq::backend::cuda::blockq
