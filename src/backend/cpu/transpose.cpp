#include "backend/cpu/transpose.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backend/cpu/threads.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

// Blocks of kBlockRows source rows x kBlockCols source columns (64 bytes of each of 128 rows for 2-byte
// elements), taken row block by row block: the best of 8-128 x 8-256 in both orders, both ways round,
// in a scratch timing of NCHW rows <-> an NHWC band of a 128-channel VAE image on one core.
constexpr int64_t kBlockRows = 128, kBlockCols = 32;

template <class T>
void block_scalar(const T* src, int64_t lds, T* dst, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];
}

#if defined(__SSE2__)
// dst[c][r] = src[r][c] for an 8 x 8 block of 16-bit values: three rounds of interleaves.
inline __attribute__((always_inline)) void t8x8_u16(const uint16_t* s, int64_t lds, uint16_t* d, int64_t ldd) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * lds));
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i) {
      b[4 * h + 2 * i] = _mm_unpacklo_epi32(a[4 * h + i], a[4 * h + i + 2]);
      b[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(a[4 * h + i], a[4 * h + i + 2]);
    }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * i) * ldd), _mm_unpacklo_epi64(b[i], b[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * i + 1) * ldd), _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
}

// dst[c][r] = src[r][c] for a 4 x 4 block of 32-bit values.
inline __attribute__((always_inline)) void t4x4_u32(const uint32_t* s, int64_t lds, uint32_t* d, int64_t ldd) {
  __m128i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * lds));
  const __m128i a0 = _mm_unpacklo_epi32(r[0], r[1]), a1 = _mm_unpackhi_epi32(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi32(r[2], r[3]), a3 = _mm_unpackhi_epi32(r[2], r[3]);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 0 * ldd), _mm_unpacklo_epi64(a0, a2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 1 * ldd), _mm_unpackhi_epi64(a0, a2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * ldd), _mm_unpacklo_epi64(a1, a3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * ldd), _mm_unpackhi_epi64(a1, a3));
}
#endif

// One source block: register transposes of V x V over the full part, element by element for the edges.
template <class T>
void block(const T* src, int64_t lds, T* dst, int64_t ldd, int64_t rows, int64_t cols) {
#if defined(__SSE2__)
  constexpr int64_t V = sizeof(T) == 2 ? 8 : 4;
  const int64_t fr = rows / V * V, fc = cols / V * V;
  for (int64_t c = 0; c < fc; c += V)
    for (int64_t r = 0; r < fr; r += V) {
      if constexpr (sizeof(T) == 2) t8x8_u16(src + r * lds + c, lds, dst + c * ldd + r, ldd);
      else t4x4_u32(src + r * lds + c, lds, dst + c * ldd + r, ldd);
    }
  if (fr < rows) block_scalar(src + fr * lds, lds, dst + fr, ldd, rows - fr, fc);
  if (fc < cols) block_scalar(src + fc, lds, dst + fc * ldd, ldd, rows, cols - fc);
#else
  block_scalar(src, lds, dst, ldd, rows, cols);
#endif
}

template <class T>
void transpose_t(int64_t rows, int64_t cols, const T* src, int64_t lds, T* dst, int64_t ldd) {
  // Tiles of kBlockRows x kBlockCols, row block by row block.
  const int64_t col_blocks = (cols + kBlockCols - 1) / kBlockCols, row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  parallel_for(col_blocks * row_blocks, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t / col_blocks * kBlockRows, c0 = t % col_blocks * kBlockCols;
      block(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd, std::min(kBlockRows, rows - r0),
            std::min(kBlockCols, cols - c0));
    }
  });
}

}  // namespace

void transpose_2d(size_t elem_bytes, int64_t rows, int64_t cols, const void* src, int64_t lds, void* dst,
                  int64_t ldd) {
  check(elem_bytes == 2 || elem_bytes == 4, "transpose_2d", "element size ", elem_bytes, " is not 2 or 4 bytes");
  if (elem_bytes == 2)
    transpose_t(rows, cols, static_cast<const uint16_t*>(src), lds, static_cast<uint16_t*>(dst), ldd);
  else
    transpose_t(rows, cols, static_cast<const uint32_t*>(src), lds, static_cast<uint32_t*>(dst), ldd);
}

void transpose_2d_reference(size_t elem_bytes, int64_t rows, int64_t cols, const void* src, int64_t lds, void* dst,
                            int64_t ldd) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(d + size_t(c * ldd + r) * elem_bytes, s + size_t(r * lds + c) * elem_bytes, elem_bytes);
}

}  // namespace diffq::backend::cpu
