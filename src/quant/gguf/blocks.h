// ggml's block layouts (ggml-common.h) as POD structs: one block holds `block_size` weights of one row,
// little-endian, no padding. f16 fields are raw IEEE half bits. Sizes are checked here and, against
// io::ggml_type_info (the one table of block sizes/bytes), by tests/quant/test_gguf_blocks.cpp.
#pragma once

#include <cstdint>

namespace diffq::quant::gguf {

inline constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK4_NL = 32;
inline constexpr int QK_K = 256;         // elements of a K-quant super-block
inline constexpr int K_SCALE_SIZE = 12;  // packed 6-bit scales + mins of Q4_K / Q5_K

using f16_bits = uint16_t;

// d*(q-8); qs[j] holds element j (low nibble) and j+16 (high nibble).
struct block_q4_0 {
  f16_bits d;
  uint8_t qs[QK4_0 / 2];
};
// d*q + m.
struct block_q4_1 {
  f16_bits d, m;
  uint8_t qs[QK4_1 / 2];
};
// d*(q-16); bit j of qh (little-endian u32) is bit 4 of element j.
struct block_q5_0 {
  f16_bits d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
struct block_q5_1 {
  f16_bits d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct block_q8_0 {
  f16_bits d;
  int8_t qs[QK8_0];
};
// 16 sub-blocks of 16: scales[j] = 4-bit scale | 4-bit min << 4; 2-bit quants; d*sc*q - dmin*m.
struct block_q2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  f16_bits d, dmin;
};
// 16 sub-blocks of 16: 6-bit signed scales (offset 32) packed in 12 bytes; 2 low bits in qs, the 3rd
// (inverted: set means +0, clear means -4) in hmask.
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  f16_bits d;
};
// 8 sub-blocks of 32: 6-bit scales and mins packed in 12 bytes; 4-bit quants.
struct block_q4_K {
  f16_bits d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
struct block_q5_K {
  f16_bits d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
// 16 sub-blocks of 16: int8 scales; 6-bit quants (4 low bits in ql, 2 high in qh), offset 32.
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  f16_bits d;
};
// d * kvalues_iq4nl[nibble], nibble order as Q4_0.
struct block_iq4_nl {
  f16_bits d;
  uint8_t qs[QK4_NL / 2];
};
// 8 sub-blocks of 32, 6-bit signed scales (offset 32): low 4 bits in scales_l, high 2 in scales_h.
struct block_iq4_xs {
  f16_bits d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
};

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_iq4_xs) == 136);
static_assert(alignof(block_q8_0) == 2 && alignof(block_iq4_xs) == 2);  // blocks sit at any even offset

// The IQ4_NL / IQ4_XS non-linear code book.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the signed scale (-32..31) of sub-block j (0..15) from the 12 packed bytes.
inline int q3k_scale(int j, const uint8_t* s) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

}  // namespace diffq::quant::gguf
