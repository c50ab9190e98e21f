// The CPU's 2-D transpose (backend/cpu/transpose.h: the NCHW <-> NHWC conversions around oneDNN's
// convolution) against its element-by-element reference, bitwise: 2- and 4-byte elements, shapes with
// and without the register blocks' multiples (8 x 8 / 4 x 4) and the cache blocks' (128 x 32), row
// strides wider than the rows, 1 and 2 threads, and destination bytes outside the transposed rectangle
// left untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/threads.h"
#include "backend/cpu/transpose.h"

namespace cpu = diffq::backend::cpu;

namespace {

struct Case {
  int64_t rows, cols, lds, ldd;
};

void check_case(size_t eb, const Case& c, int threads) {
  std::mt19937 rng(uint32_t(c.rows * 131 + c.cols * 7 + eb));
  std::vector<uint8_t> src(size_t(c.rows * c.lds) * eb);
  for (auto& b : src) b = uint8_t(rng());
  // Both destinations start with the same sentinel bytes: padding columns of dst must keep them.
  std::vector<uint8_t> got(size_t(c.cols * c.ldd) * eb, 0xa5), want = got;
  cpu::set_num_threads(threads);
  cpu::transpose_2d(eb, c.rows, c.cols, src.data(), c.lds, got.data(), c.ldd);
  cpu::transpose_2d_reference(eb, c.rows, c.cols, src.data(), c.lds, want.data(), c.ldd);
  EXPECT_EQ(got, want) << eb << "-byte " << c.rows << " x " << c.cols << " (lds " << c.lds << ", ldd " << c.ldd
                       << "), " << threads << " threads";
}

TEST(Transpose2d, EqualsTheReferenceBitwise) {
  const std::vector<Case> cases = {
      {128, 4096, 4096, 128},  // a VAE image [C, H W] -> [H W, C]
      {4096, 128, 128, 4096},  // and back
      {8, 8, 8, 8},           {4, 4, 4, 4},       {1, 1, 1, 1},       {3, 1000, 1000, 3},
      {1000, 3, 3, 1000},     {37, 29, 40, 45},   {33, 129, 130, 40}, {64, 257, 257, 64},
      {16, 300, 310, 20},     {300, 16, 20, 310}, {7, 5, 9, 11},
  };
  for (size_t eb : {size_t(2), size_t(4)})
    for (const Case& c : cases)
      for (int threads : {1, 2}) check_case(eb, c, threads);
  cpu::set_num_threads(0);
}

TEST(Transpose2d, TwiceIsTheIdentity) {
  const int64_t rows = 96, cols = 1000;
  std::vector<uint16_t> x(size_t(rows * cols)), t(x.size()), back(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = uint16_t(i * 2654435761u >> 11);
  cpu::transpose_2d(2, rows, cols, x.data(), cols, t.data(), rows);
  cpu::transpose_2d(2, cols, rows, t.data(), rows, back.data(), cols);
  EXPECT_EQ(back, x);
  EXPECT_EQ(t[size_t(5 * rows + 3)], x[size_t(3 * cols + 5)]);
}

TEST(Transpose2d, RefusesOtherElementSizes) {
  uint8_t a[4] = {}, b[4] = {};
  EXPECT_THROW(cpu::transpose_2d(1, 2, 2, a, 2, b, 2), std::exception);
}

}  // namespace
