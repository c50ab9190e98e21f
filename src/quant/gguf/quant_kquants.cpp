// Reference quantizers of the K-quants (Q2_K..Q6_K) and IQ4_NL / IQ4_XS: ggml's quantize_row_*_ref
// algorithms without an importance matrix (what ggml_quantize_chunk does with imatrix == NULL), bit-exact
// with ggml as built by the ggml-python package (tests/fixtures/quant/gguf/quantize.safetensors).
// Every float operation keeps ggml's order; no fused multiply-add may be formed here.
//
// The common pattern: per sub-block, search a scale (and for the affine types a min) that minimises a
// weighted squared error over a few candidate inverse scales; then quantize the sub-block scales
// themselves to 6 (or 8 / 4) bits against a per-super-block f16 scale, and re-quantize the elements
// with the scales as they will be dequantized.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "diffq/dtype.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::quant::gguf {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a sub-block this small is all zero

// Round to nearest, ties to even, through the float adder (ggml's nearest_int); valid for |v| < 2^22.
inline int nearest_int(float v) {
  const float t = v + 12582912.0f;  // 1.5 * 2^23
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline float h2f(f16_bits h) { return f16_to_f32(h); }

// Symmetric codes in [-nmax, nmax) (stored + nmax) for n values, best of 19 candidate scales by
// weighted error with weights x^2 (ggml make_qx_quants, rmse_type 1, no importance weights).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = int8_t(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's symmetric codes: start from the max-based scale, then up to 5 passes of coordinate descent
// on each code with weights x^2 (ggml make_q3_quants with do_rmse).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return sumlx / suml2;
}

// Affine codes in [0, nmax] with scale and min (min <= 0, returned negated in `the_min`), by weighted
// least squares over nstep+1 candidate inverse scales (ggml make_qkx2_quants). use_mad: absolute
// instead of squared error.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, size_t(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::clamp(l, 0, nmax));
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, size_t(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Index of the code-book value nearest to x (ties to the lower one unless strictly closer above).
int best_index_int8(int n, const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav; else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// Q4_K / Q5_K share everything but the code width (nmax 15 / 31) and the scale search range.
void quantize_k_affine(const float* x, uint8_t* L, f16_bits& dh, f16_bits& dminh, uint8_t* scales_out, int nmax,
                       float rmin, int nstep) {
  uint8_t Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < QK_K / 32; ++j) {
    const uint8_t ls = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_scale * scales[j])))));
    const uint8_t lm = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_min * mins[j])))));
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= uint8_t((ls >> 4) << 6);
      scales_out[j - 0] |= uint8_t((lm >> 4) << 6);
    }
  }
  dh = f32_to_f16(max_scale / 63.f);
  dminh = f32_to_f16(max_min / 63.f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, sc, m);
    const float d = h2f(dh) * float(sc);
    if (d == 0) continue;
    const float dm = h2f(dminh) * float(m);
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = uint8_t(std::clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

// IQ4_NL (one block of 32) and IQ4_XS (8 blocks of 32 with 6-bit sub-scales): ggml's
// quantize_row_iq4_nl_impl with weights x^2 and 7 tries each side of the max-based scale.
void quantize_iq4(int super_block_size, const float* x, f16_bits& dh, uint8_t* q4, uint16_t* scales_h,
                  uint8_t* scales_l) {
  constexpr int block_size = 32, ntry = 7;
  const int8_t* values = kvalues_iq4nl;
  float scales[QK_K / 32], weight[32];
  uint8_t L[QK_K];
  std::memset(L, 0, sizeof L);
  std::memset(q4, 0, size_t(super_block_size / 2));
  dh = f32_to_f16(0.f);
  float max_scale = 0, amax_scale = 0;
  const int nb = super_block_size / block_size;
  for (int ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * block_size;
    uint8_t* Lb = L + ib * block_size;
    for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < block_size; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / float(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < block_size; ++j) {
      const int l = best_index_int8(16, values, id * xb[j]);
      Lb[j] = uint8_t(l);
      const float q = values[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = float(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < block_size; ++j) {
        const int l = best_index_int8(16, values, id * xb[j]);
        const float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (nb > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    dh = f32_to_f16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    for (int ib = 0; ib < nb; ++ib) {
      int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * float(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      uint8_t* Lb = L + ib * block_size;
      const float* xb = x + ib * block_size;
      for (int j = 0; j < block_size; ++j) Lb[j] = uint8_t(best_index_int8(16, values, idl * xb[j]));
      l += 32;
      const uint8_t l_l = uint8_t(l & 0xF), l_h = uint8_t(l >> 4);
      if (ib % 2 == 0) scales_l[ib / 2] = l_l; else scales_l[ib / 2] |= uint8_t(l_l << 4);
      *scales_h |= uint16_t(l_h << (2 * (ib % 8)));
    }
  } else {
    dh = f32_to_f16(scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0.f;
    for (int j = 0; j < super_block_size; ++j) L[j] = uint8_t(best_index_int8(16, values, id * x[j]));
  }
  for (int i = 0; i < super_block_size / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = uint8_t(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

}  // namespace

void quantize_row_q2_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q2_K*>(vy);
  constexpr float q4scale = 15.f;
  uint8_t L[QK_K], Laux[16];
  float weights[16], mins[QK_K / 16], scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_f16(max_scale / q4scale);
    } else {
      std::memset(y[i].scales, 0, sizeof y[i].scales);
      y[i].d = f32_to_f16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f32_to_f16(max_min / q4scale);
    } else {
      y[i].dmin = f32_to_f16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = h2f(y[i].d) * float(y[i].scales[j] & 0xF);
      if (d == 0) continue;
      const float dm = h2f(y[i].dmin) * float(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = uint8_t(std::clamp(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
    }
    for (int j = 0; j < QK_K; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

void quantize_row_q3_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q3_K*>(vy);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        int l = std::clamp(int(int8_t(nearest_int(iscale * scales[j]))), -32, 31) + 32;
        if (j < 8) y[i].scales[j] = uint8_t(l & 0xF); else y[i].scales[j - 8] |= uint8_t((l & 0xF) << 4);
        l >>= 4;
        y[i].scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      y[i].d = f32_to_f16(1 / iscale);
    } else {
      y[i].d = f32_to_f16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = h2f(y[i].d) * float(q3k_scale(j, y[i].scales));
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::clamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    // The third bit of element j goes to hmask[j % 32], bit j / 32; qs keeps the two low bits.
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    for (int j = 0; j < QK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[j % (QK_K / 8)] |= uint8_t(1u << (j / (QK_K / 8)));
        L[j] = int8_t(L[j] - 4);
      }
    }
    for (int j = 0; j < QK_K; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

void quantize_row_q4_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q4_K*>(vy);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    quantize_k_affine(x, L, y[i].d, y[i].dmin, y[i].scales, 15, -1.f, 20);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_row_q5_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q5_K*>(vy);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    quantize_k_affine(x, L, y[i].d, y[i].dmin, y[i].scales, 31, -0.5f, 15);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int j0 = 0; j0 < QK_K; j0 += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[j0 + j], l2 = L[j0 + j + 32];
        if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
        if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
      m1 = uint8_t(m1 << 2);
      m2 = uint8_t(m2 << 2);
    }
  }
}

void quantize_row_q6_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q6_K*>(vy);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof y[i]);
      y[i].d = f32_to_f16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib)
      y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = h2f(y[i].d) * float(y[i].scales[j]);
      if (d == 0) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_row_iq4_nl(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_iq4_nl*>(vy);
  for (int64_t i = 0; i < n / QK4_NL; ++i, x += QK4_NL) {
    uint16_t unused_h = 0;
    uint8_t unused_l[4] = {};
    quantize_iq4(QK4_NL, x, y[i].d, y[i].qs, &unused_h, unused_l);
  }
}

void quantize_row_iq4_xs(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_iq4_xs*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    std::memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    quantize_iq4(QK_K, x, y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
  }
}

}  // namespace diffq::quant::gguf
