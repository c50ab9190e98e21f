// Scalar reference dequantizers, bit-exact with gguf-py's gguf.quants.dequantize (f32): every value is
// formed by the same float operations in the same order (e.g. Q4_K: (d*sc)*q - (dmin*m)), so no fused
// multiply-add may be formed here.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstring>

#include "diffq/dtype.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::quant::gguf {

namespace {
inline float h2f(f16_bits h) { return f16_to_f32(h); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
template <class B>
const B* blocks_of(const void* x) { return static_cast<const B*>(x); }
}  // namespace

void dequantize_row_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }

void dequantize_row_f16(const void* x, float* y, int64_t n) {
  const auto* p = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(p[i]);
}

void dequantize_row_bf16(const void* x, float* y, int64_t n) {
  const auto* p = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(p[i]);
}

void dequantize_row_q4_0(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q4_0>(x);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = d * float((b[i].qs[j] & 0xF) - 8);
      y[j + QK4_0 / 2] = d * float((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q4_1>(x);
  for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[j] = d * float(b[i].qs[j] & 0xF) + m;
      y[j + QK4_1 / 2] = d * float(b[i].qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q5_0(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q5_0>(x);
  for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
    const float d = h2f(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4, h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = d * float(((b[i].qs[j] & 0xF) | h0) - 16);
      y[j + QK5_0 / 2] = d * float(((b[i].qs[j] >> 4) | h1) - 16);
    }
  }
}

void dequantize_row_q5_1(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q5_1>(x);
  for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4, h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = d * float((b[i].qs[j] & 0xF) | h0) + m;
      y[j + QK5_1 / 2] = d * float((b[i].qs[j] >> 4) | h1) + m;
    }
  }
}

void dequantize_row_q8_0(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q8_0>(x);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = float(b[i].qs[j]) * d;
  }
}

void dequantize_row_q2_K(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q2_K>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {  // two sub-blocks of 16 per shift
          const uint8_t sc = b[i].scales[is++];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_K(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q3_K>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* q = b[i].qs;
    const uint8_t* hm = b[i].hmask;
    int is = 0, bit = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++bit) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * float(q3k_scale(is++, b[i].scales));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = int((q[l] >> shift) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
            *y++ = dl * float(v);
          }
        }
      }
    }
  }
}

void dequantize_row_q4_K(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q4_K>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      get_scale_min_k4(j + 1, b[i].scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_K(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q5_K>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int j = 0; j < 8; j += 2, ql += 32) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      get_scale_min_k4(j + 1, b[i].scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) | (((qh[l] >> j) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
    }
  }
}

void dequantize_row_q6_K(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_q6_K>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = (d * float(sc[is + 0])) * float(q1);
        y[l + 32] = (d * float(sc[is + 2])) * float(q2);
        y[l + 64] = (d * float(sc[is + 4])) * float(q3);
        y[l + 96] = (d * float(sc[is + 6])) * float(q4);
      }
    }
  }
}

void dequantize_row_iq4_nl(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_iq4_nl>(x);
  for (int64_t i = 0; i < n / QK4_NL; ++i, y += QK4_NL) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < QK4_NL / 2; ++j) {
      y[j] = d * float(kvalues_iq4nl[b[i].qs[j] & 0xF]);
      y[j + QK4_NL / 2] = d * float(kvalues_iq4nl[b[i].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const void* x, float* y, int64_t n) {
  const auto* b = blocks_of<block_iq4_xs>(x);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* qs = b[i].qs;
    for (int ib = 0; ib < QK_K / 32; ++ib, qs += 16, y += 32) {
      const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * float(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kvalues_iq4nl[qs[j] & 0xF]);
        y[j + 16] = dl * float(kvalues_iq4nl[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace diffq::quant::gguf
