// bf16 attention tiles with Q K^T and P V on oneDNN's bf16 matmul (see attention_onednn.h).
#include "backend/cpu/attention_onednn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/attention_bf16_dot.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/onednn_gemm.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kKeyAlign = 32;  // the softmax rows work on 2 vectors of keys at a time

struct Scratch {
  AlignedBuffer<uint16_t> k, v, q, kp, vp, qd;
  AlignedBuffer<uint32_t> pb;
  AlignedBuffer<float> s, o, mrow, stats;
};

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// C = A op(B) (+ C when accumulate), bf16 operands, f32 C: oneDNN's matmul, or (where oneDNN declines
// the shape) this plain loop with f32 accumulation.
void gemm_bf16(bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
               int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  if (onednn_gemm_bf16_part(false, trans_b, m, n, k, 1.f, a, lda, b, ldb, accumulate ? 1.f : 0.f, c, ldc)) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int64_t e = 0; e < k; ++e)
        acc += bf16_to_f32(a[i * lda + e]) * bf16_to_f32(trans_b ? b[j * ldb + e] : b[e * ldb + j]);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc : acc;
    }
}

// Rows [r0, r0 + rows) of t's head (b, h) as bf16 rows of `cols`: in place (*ld = the row stride) where
// the columns are contiguous, else copied into buf (*ld = cols).
const uint16_t* head_rows(const AttentionOperand& t, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                          AlignedBuffer<uint16_t>& buf, int64_t* ld) {
  const int64_t row_stride = rows > 1 ? t.st[2] : std::max<int64_t>(cols, 1);
  if ((t.st[3] == 1 || cols <= 1) && row_stride >= cols) {  // a matmul layout (broadcast rows are not)
    *ld = row_stride;
    return reinterpret_cast<const uint16_t*>(t.at(b, h, r0, 0));
  }
  uint16_t* dst = buf.get(size_t(std::max<int64_t>(rows * cols, 1)));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(t.at(b, h, r0 + r, 0));
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * t.st[3]];
  }
  *ld = std::max<int64_t>(cols, 1);
  return dst;
}

}  // namespace

int64_t attention_onednn_key_block(int64_t sk, int64_t bk) {
  if (sk % kOnednnPackedCols != 0) return bk;
  for (int64_t c = bk * 3 / 2 / kOnednnPackedCols * kOnednnPackedCols; c >= std::max(kOnednnPackedCols, bk / 2);
       c -= kOnednnPackedCols)
    if (sk % c == 0) return c;
  return bk;
}

bool attention_onednn_usable() {
  static const bool usable = onednn_bf16_available() && bf16_dot_gemm_usable();
  return usable;
}

void attention_tiles_onednn(const AttentionProblem& p, int64_t t0, int64_t t1) {
  const int64_t D = p.D, Dv = p.Dv, Sk = p.Sk, Sq = p.Sq;
  const int64_t sk_pad = std::max<int64_t>((Sk + kKeyAlign - 1) / kKeyAlign, 1) * kKeyAlign;
  const int64_t bk = std::min((std::max<int64_t>(p.bk, 1) + kKeyAlign - 1) / kKeyAlign * kKeyAlign, sk_pad);
  const int64_t kb = attention_onednn_key_block(Sk, bk);
  const int64_t bq = std::min(p.bq, Sq), ldo = std::max<int64_t>(Dv, 1);

  thread_local Scratch sc;
  uint32_t* const pb = sc.pb.get(size_t(bq * kb / 2));
  float* const s = sc.s.get(size_t(bq * kb));
  float* const o = sc.o.get(size_t(bq * ldo));
  float* const mrow = sc.mrow.get(size_t(kb));
  float* const stats = sc.stats.get(size_t(3 * bq));
  float *const m = stats, *const l = stats + bq, *const alpha = stats + 2 * bq;

  // The full blocks of kb keys (kb a multiple of oneDNN's 64 packed columns) multiply K and V packed once
  // per head into oneDNN's blocked layout (onednn_gemm.h), not copied by oneDNN on every block call;
  // oneDNN 2.6 takes packed operands only with dense A and C rows, so Q is copied dense per tile and
  // the last, partial block (S's rows then narrower than kb) takes the plain operands.
  const bool pack = p.pack_kv && onednn_bf16_packing_usable() && kb % kOnednnPackedCols == 0 && D > 0 && Dv > 0;
  const int64_t full = pack ? Sk / kb : 0;
  const int64_t vslab = full > 0 ? onednn_packed_bf16_elems(Dv, kb) : 0;

  int64_t bound = -1, ldk = 0, ldv = 0;
  const uint16_t *kh = nullptr, *vh = nullptr;
  uint16_t *kp = nullptr, *vp = nullptr;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t bh = t / p.q_blocks, b = bh / p.H, h = bh % p.H, i0 = (t % p.q_blocks) * p.bq;
    if (bh != bound) {  // this head's K and V rows (in place, or packed once per head)
      kh = Sk > 0 ? head_rows(p.k, b, h, 0, Sk, D, sc.k, &ldk) : nullptr;
      vh = Sk > 0 ? head_rows(p.v, b, h, 0, Sk, Dv, sc.v, &ldv) : nullptr;
      if (full > 0) {
        kp = sc.kp.get(size_t(onednn_packed_bf16_elems(full * kb, D)));
        onednn_pack_bf16_weight(full * kb, D, kh, ldk, kp);  // B = K^T: K's rows are a weight's
        vp = sc.vp.get(size_t(full * vslab));
        for (int64_t jb = 0; jb < full; ++jb) onednn_pack_bf16_b(kb, Dv, vh + jb * kb * ldv, ldv, vp + jb * vslab);
      }
      bound = bh;
    }
    const int64_t rows = std::min(p.bq, Sq - i0);
    int64_t ldq = 0;
    const uint16_t* qt = head_rows(p.q, b, h, i0, rows, D, sc.q, &ldq);
    const uint16_t* qd = qt;  // Q as dense rows for the packed products
    if (full > 0 && ldq != D) {
      uint16_t* dst = sc.qd.get(size_t(rows * D));
      for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * D, qt + r * ldq, size_t(D) * sizeof(uint16_t));
      qd = dst;
    }
    for (int64_t r = 0; r < rows; ++r) m[r] = -INFINITY, l[r] = 0.f;
    std::fill(o, o + rows * ldo, 0.f);

    for (int64_t j0 = 0; j0 < Sk; j0 += kb) {
      const int64_t n = std::min(kb, Sk - j0), jb = j0 / kb;
      const bool packed = jb < full;  // n == kb
      // 1. S = Q K^T for keys [j0, j0 + n) (row stride kb).
      if (!packed || !onednn_gemm_bf16_packed_b_part(rows, kb, D, qd, kp + onednn_packed_bf16_elems(j0, D), false, s))
        gemm_bf16(true, rows, n, D, qt, ldq, kh + j0 * ldk, ldk, false, s, kb);
      // 2. Online softmax in f32 (the vdpbf16ps tiles' row code); P as bf16 rows (stride kb).
      attention_bf16_softmax_block(p, b, h, i0, rows, rows, j0, n, s, kb, pb, kb / 2, kb / 2, mrow, m, l, alpha,
                                   [](int64_t) {});
      // 3. O = alpha O + P V over the block's keys.
      if (Dv == 0) continue;
      if (j0 > 0) attention_rescale_rows(o, ldo, Dv, alpha, rows);
      const auto* pa = reinterpret_cast<const uint16_t*>(pb);
      if (!packed || !onednn_gemm_bf16_packed_b_part(rows, Dv, kb, pa, vp + jb * vslab, j0 > 0, o))
        gemm_bf16(false, rows, Dv, n, pa, kb, vh + j0 * ldv, ldv, j0 > 0, o, ldo);
    }
    // out = O / l in the output dtype (l = 0: every key masked, 0 as torch).
    const int64_t pos0 = (b * p.H + h) * Sq + i0;
    for (int64_t r = 0; r < rows; ++r) attention_store_row(p, pos0 + r, o + r * ldo, l[r]);
  }
}

}  // namespace diffq::backend::cpu
