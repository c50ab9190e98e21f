// bf16 attention tiles with Q K^T and P V on AMX tiles (see attention_amx.h).
#include "backend/cpu/attention_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/attention_bf16_dot.h"
#include "backend/cpu/bf16_dot_gemm.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kRows = 32;      // query rows per block: two 16-row A / C tiles
// Keys per softmax block: at most this many, in equal blocks (a multiple of 32): Wan-small's 1280 as 2 x 640,
// FLUX's 768 as one (measured against 256-1024 on an AMX Xeon: docs/benchmarks.md "Ninth AMX session").
constexpr int64_t kMaxKeys = 768;
constexpr int64_t kTileElems = 512;  // one packed B tile: 16 pairs x 16 columns x 2 bf16 (1 KiB)

constexpr int64_t up32(int64_t n) { return (n + 31) / 32 * 32; }

// Tiles (amx_tiles.h): 0-3 the f32 accumulators (16 x 16), 4-5 the A tiles (16 x 32 bf16), 6-7 the B tiles
// (16 pairs x 16 columns).

struct Scratch {
  AlignedBuffer<uint16_t> kd, vd, kp, vp, q, pb;
  AlignedBuffer<float> s, o, mrow, stats;
};

// Rows [r0, r0 + rows) of t's head (b, h) as dense bf16 rows of `ld` elements in dst: `cols` values, then
// zeros up to ld; then zero rows up to `total` rows.
void copy_dense(const AttentionOperand& t, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                int64_t total, int64_t ld, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* d = dst + r * ld;
    const auto* src = reinterpret_cast<const uint16_t*>(t.at(b, h, r0 + r, 0));
    if (t.st[3] == 1 || cols <= 1)
      std::memcpy(d, src, size_t(cols) * sizeof(uint16_t));
    else
      for (int64_t c = 0; c < cols; ++c) d[c] = src[c * t.st[3]];
    std::fill(d + cols, d + ld, uint16_t(0));
  }
  std::fill(dst + rows * ld, dst + total * ld, uint16_t(0));
}

// (GCC 12's gather / widening / shift intrinsics pass _mm512_undefined_epi32(), a self-initialised variable, as the
// unused merge source: -Wmaybe-uninitialized flags their inlined uses, depending on what else is inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// K (dense [skp][dp]) as B tiles of S = Q K^T: tile (g, c) for keys [16 g, 16 g + 16) and head-dim values
// [32 c, 32 c + 32) at kp + (g * dp / 32 + c) * 512, row p (a pair of head-dim values) holding
// (K[j][32 c + 2 p], K[j][32 c + 2 p + 1]) for the tile's 16 keys j.
DIFFQ_AMX_TARGET void pack_k(const uint16_t* kd, int64_t skp, int64_t dp, uint16_t* kp) {
  const auto* k32 = reinterpret_cast<const int*>(kd);
  auto* dst = reinterpret_cast<int*>(kp);
  const int64_t chunks = dp / 32, half = dp / 2;
  // Row p of a tile gathers the p-th pair of the 16 keys' rows (a stride of half pairs).
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(int(half)));
  for (int64_t g = 0; g < skp / 16; ++g)
    for (int64_t c = 0; c < chunks; ++c, dst += 256) {
      const int* src = k32 + g * 16 * half + c * 16;
      for (int64_t p = 0; p < 16; ++p) _mm512_store_si512(dst + p * 16, _mm512_i32gather_epi32(rows, src + p, 4));
    }
}

// V (dense [skp][dvp]) as B tiles of O = P V: tile (kc, dg) for keys [32 kc, 32 kc + 32) and value columns
// [16 dg, 16 dg + 16) at vp + (kc * dvp / 16 + dg) * 512, row p holding (V[32 kc + 2 p][c], V[32 kc + 2 p + 1][c])
// for the tile's 16 columns c.
DIFFQ_AMX_TARGET void pack_v(const uint16_t* vd, int64_t skp, int64_t dvp, uint16_t* vp) {
  const int64_t groups = dvp / 16;
  for (int64_t kc = 0; kc < skp / 32; ++kc)
    for (int64_t dg = 0; dg < groups; ++dg) {
      uint16_t* tile = vp + (kc * groups + dg) * kTileElems;
      for (int64_t p = 0; p < 16; ++p) {
        const uint16_t* r0 = vd + (kc * 32 + 2 * p) * dvp + dg * 16;
        const __m512i lo = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(r0)));
        const __m512i hi = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(r0 + dvp)));
        _mm512_store_si512(tile + p * 32, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
}
#pragma GCC diagnostic pop

// Columns [32 g2, 32 g2 + 32) of S[32][kb] (f32) = Q (dense [32][dp]) K^T, keys from the packed tiles at kp
// (2 x 2 accumulators over the head dim in steps of 32).
DIFFQ_AMX_TARGET void qk_group(const uint16_t* q, int64_t dp, const uint16_t* kp, int64_t g2, int64_t kb, float* s) {
  const int64_t chunks = dp / 32, lq = dp * 2, ls = kb * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t* b0 = kp + 2 * g2 * chunks * kTileElems;
  const uint16_t* b1 = b0 + chunks * kTileElems;
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, q + c * 32, lq);
    _tile_loadd(5, q + 16 * dp + c * 32, lq);
    _tile_loadd(6, b0 + c * kTileElems, 64);
    _tile_loadd(7, b1 + c * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float* s0 = s + g2 * 32;
  _tile_stored(0, s0, ls);
  _tile_stored(1, s0 + 16, ls);
  _tile_stored(2, s0 + 16 * kb, ls);
  _tile_stored(3, s0 + 16 * kb + 16, ls);
}

// O[32][dvp] (f32) += P (bf16 [32][kb]) V over the n32 x 32 keys whose packed tiles start at vp.
DIFFQ_AMX_TARGET void pv_block(const uint16_t* pb, int64_t kb, const uint16_t* vp, int64_t n32, int64_t dvp,
                               float* o) {
  const int64_t groups = dvp / 16, lo = dvp * 4, lp = kb * 2;
  for (int64_t d2 = 0; d2 < groups / 2; ++d2) {
    float* o0 = o + d2 * 32;
    _tile_loadd(0, o0, lo);
    _tile_loadd(1, o0 + 16, lo);
    _tile_loadd(2, o0 + 16 * dvp, lo);
    _tile_loadd(3, o0 + 16 * dvp + 16, lo);
    for (int64_t kc = 0; kc < n32; ++kc) {
      const uint16_t* b0 = vp + (kc * groups + 2 * d2) * kTileElems;
      _tile_loadd(4, pb + kc * 32, lp);
      _tile_loadd(5, pb + 16 * kb + kc * 32, lp);
      _tile_loadd(6, b0, 64);
      _tile_loadd(7, b0 + kTileElems, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, o0, lo);
    _tile_stored(1, o0 + 16, lo);
    _tile_stored(2, o0 + 16 * dvp, lo);
    _tile_stored(3, o0 + 16 * dvp + 16, lo);
  }
}

}  // namespace

bool attention_amx_usable() {
  return amx_bf16_usable() && bf16_dot_gemm_usable();  // (asked each time: a SIMD target forced lower turns the tiles off)
}

namespace {

// One step of a thread's work: the block of up to 32 query rows [i0, i0 + rows) of head (b, h) against the
// block of keys [j0, j0 + n) (n = 0: no keys at all). Steps go key block by key block, then row block by row
// block through each tile (b, h, bq query rows) of the thread's range.
struct Step {
  bool valid = false;
  int64_t t = 0, bh = 0, b = 0, h = 0, i0 = 0, rows = 0, j0 = 0, n = 0;
  bool first_keys() const { return j0 == 0; }
};

struct Steps {
  const AttentionProblem& p;
  int64_t t1, kb;

  Step at(int64_t t, int64_t i0, int64_t j0) const {
    Step s;
    if (t >= t1) return s;
    s.valid = true, s.t = t, s.bh = t / p.q_blocks, s.b = s.bh / p.H, s.h = s.bh % p.H, s.i0 = i0, s.j0 = j0;
    const int64_t tile_end = std::min((t % p.q_blocks) * p.bq + p.bq, p.Sq);
    s.rows = std::min(kRows, tile_end - i0);
    s.n = std::min(kb, p.Sk - j0);
    return s;
  }
  Step first(int64_t t0) const { return at(t0, (t0 % p.q_blocks) * p.bq, 0); }
  bool last_keys(const Step& s) const { return s.j0 + kb >= p.Sk; }
  Step next(const Step& s) const {
    if (!last_keys(s)) return at(s.t, s.i0, s.j0 + kb);
    const int64_t tile_end = std::min((s.t % p.q_blocks) * p.bq + p.bq, p.Sq);
    if (s.i0 + kRows < tile_end) return at(s.t, s.i0 + kRows, 0);
    return first(s.t + 1);
  }
};

}  // namespace

void attention_tiles_amx(const AttentionProblem& p, int64_t t0, int64_t t1) {
  const int64_t Sk = p.Sk, Sq = p.Sq;
  const int64_t dp = std::max<int64_t>(up32(p.D), 32), dvp = std::max<int64_t>(up32(p.Dv), 32);
  const int64_t skp = std::max<int64_t>(up32(Sk), 32);
  const int64_t kb = up32((skp + (skp + kMaxKeys - 1) / kMaxKeys - 1) / ((skp + kMaxKeys - 1) / kMaxKeys));

  thread_local Scratch sc;
  uint16_t* const kd = sc.kd.get(size_t(skp * dp));
  uint16_t* const vd = sc.vd.get(size_t(skp * dvp));
  uint16_t* const kp = sc.kp.get(size_t(skp * dp));
  uint16_t* const vp = sc.vp.get(size_t(skp * dvp));
  uint16_t* const q2 = sc.q.get(size_t(2 * kRows * dp));  // two row blocks' Q: this step's and the next's
  uint16_t* const pb = sc.pb.get(size_t(kRows * kb));
  float* const s2 = sc.s.get(size_t(2 * kRows * kb));  // two steps' S
  float* const o = sc.o.get(size_t(kRows * dvp));
  float* const mrow = sc.mrow.get(size_t(kb));
  float* const stats = sc.stats.get(size_t(3 * kRows));
  float *const m = stats, *const l = stats + kRows, *const alpha = stats + 2 * kRows;
  auto* const pb32 = reinterpret_cast<uint32_t*>(pb);

  const Steps steps{p, t1, kb};
  int64_t bound = -1;
  const auto bind_head = [&](const Step& st) {  // the step's head's K and V, packed once
    if (st.bh == bound) return;
    if (Sk > 0) {
      copy_dense(p.k, st.b, st.h, 0, Sk, p.D, skp, dp, kd);
      copy_dense(p.v, st.b, st.h, 0, Sk, p.Dv, skp, dvp, vd);
    } else {
      std::fill(kd, kd + skp * dp, uint16_t(0));
      std::fill(vd, vd + skp * dvp, uint16_t(0));
    }
    pack_k(kd, skp, dp, kp);
    pack_v(vd, skp, dvp, vp);
    bound = st.bh;
  };
  const auto kp_of = [&](const Step& st) { return kp + (st.j0 / 16) * (dp / 32) * kTileElems; };
  const auto groups_of = [](const Step& st) { return up32(st.n) / 32; };

  amx_load_tile_config();
  Step cur = steps.first(t0);
  int qs = 0, ss = 0;  // which Q and S buffers the current step reads
  if (cur.valid) {
    bind_head(cur);
    copy_dense(p.q, cur.b, cur.h, cur.i0, cur.rows, p.D, kRows, dp, q2);
    for (int64_t g = 0; g < groups_of(cur); ++g) qk_group(q2, dp, kp_of(cur), g, kb, s2);
  }
  while (cur.valid) {
    const Step nxt = steps.next(cur);
    // S = Q K^T of the next step runs on the matrix tiles between this step's softmax rows (the core overlaps
    // the two) where it needs no other K: same head.
    const bool overlap = nxt.valid && nxt.bh == cur.bh;
    const int nqs = nxt.first_keys() ? 1 - qs : qs;
    uint16_t* const qn = q2 + nqs * kRows * dp;
    float* const sn = s2 + (1 - ss) * kRows * kb;
    if (overlap && nxt.first_keys()) copy_dense(p.q, nxt.b, nxt.h, nxt.i0, nxt.rows, p.D, kRows, dp, qn);
    const int64_t next_groups = overlap ? groups_of(nxt) : 0;
    int64_t done = 0;

    const int64_t rows = cur.rows, n = cur.n, n32 = groups_of(cur);
    float* const s = s2 + ss * kRows * kb;
    if (cur.first_keys()) {
      for (int64_t r = 0; r < kRows; ++r) m[r] = -INFINITY, l[r] = 0.f;
      std::fill(o, o + kRows * dvp, 0.f);
      // P's padding rows stay zero (their O rows are never stored).
      if (rows < kRows) std::fill(pb + rows * kb, pb + kRows * kb, uint16_t(0));
    }
    if (n > 0) {
      // Online softmax in f32; P as bf16 rows (zeros from n up to 32 n32); the next step's S between the rows.
      attention_bf16_softmax_block(p, cur.b, cur.h, cur.i0, rows, rows, cur.j0, n, s, kb, pb32, kb / 2, kb / 2, mrow, m,
                                   l, alpha, [&](int64_t r) {
                                     for (const int64_t want = next_groups * (r + 1) / rows; done < want; ++done)
                                       qk_group(qn, dp, kp_of(nxt), done, kb, sn);
                                   });
      // O = alpha O + P V over the block's keys.
      if (!cur.first_keys()) attention_rescale_rows(o, dvp, dvp, alpha, rows);
      pv_block(pb, kb, vp + (cur.j0 / 32) * (dvp / 16) * kTileElems, n32, dvp, o);
    }
    for (; done < next_groups; ++done) qk_group(qn, dp, kp_of(nxt), done, kb, sn);
    if (steps.last_keys(cur)) {  // out = O / l in the output dtype (l = 0: every key masked, 0 as torch)
      const int64_t pos0 = (cur.b * p.H + cur.h) * Sq + cur.i0;
      for (int64_t r = 0; r < rows; ++r) attention_store_row(p, pos0 + r, o + r * dvp, l[r]);
    }
    if (nxt.valid && !overlap) {  // another head: its K and V first, then its first S
      bind_head(nxt);
      copy_dense(p.q, nxt.b, nxt.h, nxt.i0, nxt.rows, p.D, kRows, dp, qn);
      for (int64_t g = 0; g < groups_of(nxt); ++g) qk_group(qn, dp, kp_of(nxt), g, kb, sn);
    }
    cur = nxt, qs = nqs, ss = 1 - ss;
  }
  amx_release_tiles();
}

}  // namespace diffq::backend::cpu
