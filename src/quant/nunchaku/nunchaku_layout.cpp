#include "quant/nunchaku/nunchaku_layout.h"

#include <cstring>

namespace diffq::quant::nunchaku {

bool svdq_packed_layout(int64_t n, int64_t k, int64_t r) { return n % 128 == 0 && k % 128 == 0 && r % 16 == 0; }

void svdq_decode_codes(const uint8_t* q, int64_t n, int64_t k, bool packed, int8_t* codes) {
  auto sext = [](uint32_t v) { return int8_t(v >= 8 ? int(v) - 16 : int(v)); };
  if (!packed) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < k; ++c) {
        const uint8_t b = q[i * (k / 2) + c / 2];
        codes[i * k + c] = sext(c % 2 ? b >> 4 : b & 0xF);
      }
    return;
  }
  const int64_t kblocks = k / 64;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t nb = i / 128, np = i % 128 / 16, ns = i % 16 / 8, nl = i % 8;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t kb = c / 64, ks = c % 64 / 32, kl = c % 32 / 8, kr = c % 8;
      const int64_t word = (((((nb * kblocks + kb) * 8 + np) * 8 + nl) * 4 + kl) * 2 + ns) * 2 + ks;
      uint32_t w;
      std::memcpy(&w, q + word * 4, 4);  // little-endian int32, as torch's view(int8) of the words
      codes[i * k + c] = sext((w >> (4 * kr)) & 0xF);
    }
  }
}

int64_t svdq_scale_index(int64_t g, int64_t j, int64_t groups, int64_t n, bool packed) {
  if (!packed) return g * n + j;
  const int64_t nb = j / 128, a = j % 128 / 16, b = j % 16 / 8, c = j % 8 / 2, d = j % 2;
  return ((nb * groups + g) * 8 + a) * 16 + c * 4 + b * 2 + d;
}

namespace {
// The 16x16 low-rank tile order: row index i (n side), column index j (k side); (outer, inner) blocks.
int64_t lowrank_index(int64_t i, int64_t j, int64_t outer, int64_t inner, int64_t inner_blocks) {
  const int64_t a = i % 16 / 8, b = i % 8, p = j % 16 / 8, q = j % 8 / 2, s = j % 2;
  return (((((outer * inner_blocks + inner) * 8 + b) * 4 + q) * 2 + a) * 2 + p) * 2 + s;
}
}  // namespace

int64_t svdq_down_index(int64_t kk, int64_t rr, int64_t k, int64_t r, bool packed) {
  if (!packed) return kk * r + rr;
  (void)k;
  return lowrank_index(rr, kk, kk / 16, rr / 16, r / 16);
}

int64_t svdq_up_index(int64_t nn, int64_t rr, int64_t n, int64_t r, bool packed) {
  if (!packed) return nn * r + rr;
  (void)n;
  return lowrank_index(nn, rr, nn / 16, rr / 16, r / 16);
}

int awq_code(const int32_t* qweight, int64_t k, int64_t nn, int64_t kk) {
  const int64_t g = kk / 64, c = kk % 64;
  const int64_t p = (c / 32) * 4 + (c % 8) / 2, nib = (c % 32) / 8 + 4 * (c % 2);
  const uint32_t w = uint32_t(qweight[(nn / 4) * (k / 2) + g * 32 + (nn % 4) * 8 + p]);
  return int((w >> (4 * nib)) & 0xF);
}

}  // namespace diffq::quant::nunchaku
