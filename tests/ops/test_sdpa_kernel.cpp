// The CPU attention kernel (backend/cpu/attention.cpp) against the f64 scalar reference
// (reference::sdpa) on the shapes its micro-kernels have edges for: head sizes that are not a multiple
// of the key/column panels (D, Dv = 0, 1, 24, 72, 128, Dv != D), one query row, fewer keys than a tile,
// masks (additive with -inf and fully masked rows: 0 as torch, see test_sdpa_torch.cpp; bool, key padding, strided and
// broadcast over the keys), f16/bf16 inputs,
// strided views, and every kind of tiling; results are identical for 1 and 2 threads. Also the
// kernel's base-2 exponential against std::exp2.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_amx.h"
#include "backend/cpu/attention_bf16_dot.h"
#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "backend/reference/reference_ops.h"
#include "ops/ops.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

enum class MaskKind {
  none,
  additive,      // f32 [1, 1, Sq, Sk]: N(0, 1), ~25% -inf, row 1 all -inf
  bool_rows,     // bool [B, 1, Sq, Sk]: ~70% true, row 2 all false
  key_padding,   // bool [B, 1, 1, Sk]: the last third of the keys masked
  transposed,    // f32 [1, H, Sq, Sk] with keys strided (a transposed [1, H, Sk, Sq] tensor), finite
  per_query,     // f32 [1, 1, Sq, 1]: one value broadcast over the keys (stride 0)
};

struct Case {
  std::string name;
  int64_t B, H, Sq, Sk, D, Dv;
  DType dt = DType::f32;
  MaskKind mask = MaskKind::none;
  double scale = 0;         // 0: 1/sqrt(D)
  bool flux_layout = false; // q/k/v are [B, S, H, D] tensors seen as [B, H, S, D]
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor random_tensor(const Shape& shape, DType dt, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t.to(dt);
}

Tensor make_mask(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::normal_distribution<float> n(0.f, 1.f);
  switch (c.mask) {
    case MaskKind::none: return Tensor();
    case MaskKind::additive: {
      Tensor m = Tensor::empty({1, 1, c.Sq, c.Sk}, DType::f32);
      float* p = m.data<float>();
      for (int64_t i = 0; i < c.Sq; ++i)
        for (int64_t j = 0; j < c.Sk; ++j)
          p[i * c.Sk + j] = (i == 1 % c.Sq || u(rng) < 0.25f) ? -INFINITY : n(rng);
      if (c.Sq > 1) p[0] = 0.f;  // row 0 attends to something
      return m;
    }
    case MaskKind::bool_rows: {
      Tensor m = Tensor::empty({c.B, 1, c.Sq, c.Sk}, DType::f32);
      float* p = m.data<float>();
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Sq; ++i)
          for (int64_t j = 0; j < c.Sk; ++j)
            p[(b * c.Sq + i) * c.Sk + j] = (i != 2 % c.Sq && (j == 0 || u(rng) < 0.7f)) ? 1.f : 0.f;
      return m.to(DType::boolean);
    }
    case MaskKind::key_padding: {
      Tensor m = Tensor::empty({c.B, 1, 1, c.Sk}, DType::f32);
      float* p = m.data<float>();
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = 0; j < c.Sk; ++j) p[b * c.Sk + j] = (j == 0 || 3 * j < 2 * c.Sk) ? 1.f : 0.f;
      return m.to(DType::boolean);
    }
    case MaskKind::transposed:
      return random_tensor({1, c.H, c.Sk, c.Sq}, DType::f32, rng).transpose(2, 3);
    case MaskKind::per_query: return random_tensor({1, 1, c.Sq, 1}, DType::f32, rng);
  }
  return Tensor();
}

struct Inputs {
  Tensor q, k, v, mask;
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(uint32_t(std::hash<std::string>{}(c.name)));
  Inputs in;
  if (c.flux_layout) {
    in.q = random_tensor({c.B, c.Sq, c.H, c.D}, c.dt, rng).transpose(1, 2);
    in.k = random_tensor({c.B, c.Sk, c.H, c.D}, c.dt, rng).transpose(1, 2);
    in.v = random_tensor({c.B, c.Sk, c.H, c.Dv}, c.dt, rng).transpose(1, 2);
  } else {
    in.q = random_tensor({c.B, c.H, c.Sq, c.D}, c.dt, rng);
    in.k = random_tensor({c.B, c.H, c.Sk, c.D}, c.dt, rng);
    in.v = random_tensor({c.B, c.H, c.Sk, c.Dv}, c.dt, rng);
  }
  in.mask = make_mask(c, rng);
  return in;
}

// max |got - ref| / max |ref| over the finite reference values; non-finite ones must match exactly.
double rel_error(const std::vector<float>& got, const reference::Array& ref, int64_t* nan_rows) {
  double worst = 0, scale = 1e-30;
  for (const double r : ref.v)
    if (std::isfinite(r)) scale = std::max(scale, std::abs(r));
  *nan_rows = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = ref.v[i];
    if (!std::isfinite(r)) {
      if (std::isnan(r) ? !std::isnan(got[i]) : double(got[i]) != r) return INFINITY;
      ++*nan_rows;
      continue;
    }
    worst = std::max(worst, std::abs(double(got[i]) - r) / scale);
  }
  return worst;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using Tilings = std::vector<std::pair<int64_t, int64_t>>;  // (attn_bq, attn_bk); (0, 0): defaults

void expect_matches_reference(const Case& c, const Tilings& tilings,
                              cpu::GemmKernel kernel = cpu::GemmKernel::best,
                              cpu::AttentionKernel attention = cpu::AttentionKernel::best) {
  const Inputs in = make_inputs(c);
  reference::Array ref = reference::sdpa(reference::from_tensor(in.q), reference::from_tensor(in.k),
                                         reference::from_tensor(in.v), reference::from_tensor(in.mask),
                                         in.mask.defined() && in.mask.dtype() == DType::boolean, c.scale);
  reference::round_to(ref, c.dt);
  const double tol = c.dt == DType::f32 ? 2e-6 : c.dt == DType::f16 ? 2e-3 : 1e-2;
  const bool expect_nan_rows = c.D == 0 && c.scale == 0;  // 0 * inf scores; masked rows are 0
  for (const auto& [bq, bk] : tilings) {
    cpu::Tuning t;
    t.gemm_kernel = kernel;  // diffq_widen: bf16 inputs on the f32 tiles even where the bf16 dot exists
    t.attention_kernel = attention;
    if (bq > 0) t.attn_bq = bq, t.attn_bk = bk;
    cpu::ScopedTuning scope(t);
    std::vector<float> first;
    for (const int threads : {1, 2}) {
      cpu::set_num_threads(threads);
      const Tensor o = ops::sdpa(in.q, in.k, in.v, in.mask, c.scale);
      cpu::set_num_threads(0);
      ASSERT_EQ(o.shape(), (Shape{c.B, c.H, c.Sq, c.Dv}));
      ASSERT_EQ(o.dtype(), c.dt);
      const std::vector<float> got = o.to_f32_vector();
      int64_t nans = 0;
      const double err = rel_error(got, ref, &nans);
      EXPECT_LE(err, tol) << c.name << " tiles " << t.attn_bq << " x " << t.attn_bk << ", " << threads
                          << " threads";
      EXPECT_EQ(nans > 0, expect_nan_rows) << c.name;
      if (threads == 1) {
        first = got;
      } else {
        EXPECT_TRUE(same_bits(first, got)) << c.name << ": 1 and 2 threads differ";
      }
    }
  }
}

class SdpaKernel : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaKernel, MatchesTheF64ReferenceForEveryTilingAndThreadCount) {
  expect_matches_reference(GetParam(),
                           {{0, 0}, {1, 1}, {6, 16}, {7, 33}, {13, 100}, {64, 4096}, {1000, 8}});
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SdpaKernel,
    ::testing::Values(Case{"d1", 1, 2, 5, 7, 1, 1}, Case{"d0", 1, 2, 3, 4, 0, 5},
                      Case{"d0_scaled", 1, 2, 3, 4, 0, 5, DType::f32, MaskKind::none, 0.5},
                      Case{"d24", 2, 2, 33, 50, 24, 24},
                      Case{"d72", 1, 3, 20, 130, 72, 72}, Case{"d128", 1, 2, 13, 70, 128, 128},
                      Case{"d24_dv40", 1, 2, 19, 45, 24, 40}, Case{"d64_dv17", 1, 2, 12, 40, 64, 17},
                      Case{"one_query", 2, 3, 1, 300, 64, 64}, Case{"one_key", 1, 2, 9, 1, 16, 16},
                      Case{"fewer_keys_than_a_tile", 1, 2, 40, 5, 64, 64},
                      Case{"flux_like", 1, 2, 70, 150, 64, 64},
                      Case{"scale", 1, 2, 17, 33, 32, 32, DType::f32, MaskKind::none, 0.3},
                      Case{"additive_mask", 2, 2, 9, 70, 16, 16, DType::f32, MaskKind::additive},
                      Case{"bool_mask_rows", 2, 2, 11, 37, 24, 8, DType::f32, MaskKind::bool_rows},
                      Case{"key_padding", 2, 3, 10, 50, 64, 64, DType::f32, MaskKind::key_padding},
                      Case{"mask_strided_keys", 1, 2, 13, 40, 16, 16, DType::f32, MaskKind::transposed},
                      Case{"mask_per_query", 1, 2, 13, 40, 16, 16, DType::f32, MaskKind::per_query},
                      Case{"bf16", 1, 2, 30, 60, 64, 64, DType::bf16},
                      Case{"bf16_masked", 1, 2, 14, 33, 72, 72, DType::bf16, MaskKind::additive},
                      Case{"f16", 1, 2, 10, 20, 24, 24, DType::f16},
                      Case{"flux_layout_bf16", 1, 3, 25, 25, 64, 64, DType::bf16, MaskKind::none, 0,
                           true},
                      Case{"flux_layout_f32", 1, 3, 25, 25, 40, 40, DType::f32, MaskKind::none, 0,
                           true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The cases of every bf16 tile kind (vdpbf16ps, oneDNN's matmul, diffq's AMX tiles): FLUX's joint sequence
// (Sq = Sk, [B, S, H, D] views read in place), Wan's self (Sq = Sk) and cross attention (512 text keys), head
// dim 128, sizes that are no multiple of the tiles, Dv != D, odd head sizes (pairs and rows padded), head
// dims and value widths past one tile, D 0 and 1, one key, one query, masks of every kind with fully masked
// rows.
std::vector<Case> bf16_tile_cases() {
  return {Case{"flux_joint", 1, 3, 96, 96, 128, 128, DType::bf16, MaskKind::none, 0, true},
          Case{"flux_joint_odd", 1, 2, 77, 77, 128, 128, DType::bf16, MaskKind::none, 0, true},
          // full blocks of keys on K and V packed per head, then a partial one; Q's rows in place
          Case{"flux_joint_long", 1, 2, 300, 300, 128, 128, DType::bf16, MaskKind::none, 0, true},
          Case{"wan_self_long_masked", 1, 2, 70, 530, 64, 96, DType::bf16, MaskKind::key_padding},
          Case{"wan_self", 1, 2, 130, 130, 128, 128, DType::bf16},
          Case{"wan_self_odd", 2, 2, 61, 61, 128, 128, DType::bf16},
          Case{"wan_cross", 1, 2, 50, 512, 128, 128, DType::bf16},
          // keys a multiple of 64: blocks that divide them (2 x 640 at the default tiles)
          Case{"wan_small_self", 1, 1, 40, 1280, 128, 128, DType::bf16},
          Case{"wan_cross_padded", 1, 2, 37, 512, 128, 128, DType::bf16, MaskKind::key_padding},
          Case{"d1", 1, 2, 5, 7, 1, 1, DType::bf16},
          Case{"d0", 1, 2, 3, 4, 0, 5, DType::bf16},
          Case{"d23_dv40", 1, 2, 19, 45, 23, 40, DType::bf16},
          Case{"d64_dv17", 1, 2, 12, 41, 64, 17, DType::bf16},
          Case{"d128", 1, 2, 13, 70, 128, 128, DType::bf16},
          Case{"d160_dv200", 1, 2, 33, 300, 160, 200, DType::bf16},
          Case{"one_key", 1, 2, 9, 1, 16, 16, DType::bf16},
          Case{"one_query", 2, 3, 1, 301, 64, 64, DType::bf16},
          Case{"additive", 2, 2, 9, 71, 16, 16, DType::bf16, MaskKind::additive},
          Case{"key_padding", 2, 3, 10, 50, 64, 64, DType::bf16, MaskKind::key_padding},
          Case{"flux_layout_d64", 1, 3, 25, 35, 64, 64, DType::bf16, MaskKind::none, 0, true},
          Case{"bool_rows", 2, 2, 11, 37, 24, 8, DType::bf16, MaskKind::bool_rows},
          Case{"mask_strided", 1, 2, 13, 40, 16, 16, DType::bf16, MaskKind::transposed},
          Case{"mask_per_query", 1, 2, 13, 40, 16, 16, DType::bf16, MaskKind::per_query},
          Case{"scale", 1, 2, 17, 33, 32, 32, DType::bf16, MaskKind::none, 0.3}};
}

// bf16 inputs: on the bf16 dot-product tiles where the CPU has AVX512-BF16 (attention_bf16_dot.h; the
// f32 tiles elsewhere and under the @AVX2 registration), and on the f32 tiles forced (diffq-widen):
// bf16_tile_cases() (odd key counts: key pairs padded), every tiling.
class SdpaBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaBf16, MatchesTheF64ReferenceOnBothTiles) {
  const Tilings tilings = {{0, 0}, {1, 1}, {6, 16}, {7, 33}, {13, 100}, {64, 4096}};
  expect_matches_reference(GetParam(), tilings);
  expect_matches_reference(GetParam(), tilings, cpu::GemmKernel::diffq_widen);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaBf16, ::testing::ValuesIn(bf16_tile_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Where the CPU has the bf16 dot product the default runs the bf16 tiles (P rounded to bf16: other
// bits than the f32 tiles), and diffq-widen the f32 ones.
TEST(SdpaBf16Choice, DotTilesRunWhereTheCpuHasThem) {
  const Case c{"choice", 1, 2, 40, 90, 64, 64, DType::bf16};
  const Inputs in = make_inputs(c);
  auto run = [&](cpu::GemmKernel k) {
    cpu::Tuning t;
    t.gemm_kernel = k;
    cpu::ScopedTuning scope(t);
    return ops::sdpa(in.q, in.k, in.v, in.mask, c.scale).to_f32_vector();
  };
  const bool differ = !same_bits(run(cpu::GemmKernel::best), run(cpu::GemmKernel::diffq_widen));
  EXPECT_EQ(differ, cpu::bf16_dot_gemm_usable())
      << "the bf16 dot tiles run exactly where bf16_dot_gemm_usable() (avx512_bf16 and an AVX3 target)";
}

// bf16 inputs on the oneDNN tiles (attention_onednn.h: Q K^T and P V on oneDNN's bf16 matmul, the
// vdpbf16ps tiles' softmax rows, P in bf16), forced, with the bf16 tolerance of the vdpbf16ps tiles, on
// bf16_tile_cases() and every tiling (tilings with blocks of a multiple of 64 keys run their full blocks on
// K and V packed for oneDNN); 1 and 2 threads give the same bits.
class SdpaOnednn : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaOnednn, MatchesTheF64Reference) {
  if (!cpu::attention_onednn_usable())
    GTEST_SKIP() << "the oneDNN attention tiles need oneDNN's native bf16 matmul (" << cpu::onednn_bf16_impl()
                 << ") and AVX512-BF16 for the softmax rows (bf16_dot_gemm_usable: "
                 << cpu::bf16_dot_gemm_usable() << ")";
  expect_matches_reference(GetParam(), {{0, 0}, {1, 1}, {6, 16}, {7, 33}, {13, 100}, {64, 4096}},
                           cpu::GemmKernel::best, cpu::AttentionKernel::onednn);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaOnednn, ::testing::ValuesIn(bf16_tile_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// bf16 inputs on the AMX tiles (attention_amx.h: both products on AMX tiles written for attention, the
// vdpbf16ps tiles' softmax rows, P in bf16), forced, on bf16_tile_cases() (head dims and value widths
// padded to 32, keys and query rows to 32; two key blocks for Wan-small's 1280 keys; row blocks that run
// across heads) and every tiling; 1 and 2 threads give the same bits.
class SdpaAmx : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaAmx, MatchesTheF64Reference) {
  if (!cpu::attention_amx_usable())
    GTEST_SKIP() << "the AMX attention tiles need AMX-BF16 (amx_bf16 " << cpu::cpu_features().amx_bf16
                 << ", tile state granted " << cpu::amx_tiles_permitted() << ") and AVX512-BF16 for the softmax rows";
  expect_matches_reference(GetParam(), {{0, 0}, {1, 1}, {6, 16}, {7, 33}, {13, 100}, {64, 4096}},
                           cpu::GemmKernel::best, cpu::AttentionKernel::amx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaAmx, ::testing::ValuesIn(bf16_tile_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The key blocks split the keys evenly where a multiple of 64 near the tuning's block divides them, else
// keep the tuning's block.
TEST(SdpaOnednn, KeyBlocksDivideTheKeys) {
  EXPECT_EQ(cpu::attention_onednn_key_block(1280, 512), 640);  // Wan-small self attention
  EXPECT_EQ(cpu::attention_onednn_key_block(768, 512), 768);   // FLUX, 256 x 256: one block
  EXPECT_EQ(cpu::attention_onednn_key_block(1536, 512), 768);
  EXPECT_EQ(cpu::attention_onednn_key_block(512, 512), 512);   // Wan's text
  EXPECT_EQ(cpu::attention_onednn_key_block(4096, 512), 512);
  EXPECT_EQ(cpu::attention_onednn_key_block(4680, 512), 512);  // no multiple of 64: the tuning's
  EXPECT_EQ(cpu::attention_onednn_key_block(1280, 32), 32);    // too small a block to move
  EXPECT_EQ(cpu::attention_onednn_key_block(320, 320), 320);
  EXPECT_EQ(cpu::attention_onednn_key_block(192, 128), 192);
}

// Q, K, V with strided head columns (a transposed view): packed per head instead of read in place.
TEST(SdpaOnednn, StridedColumnsArePacked) {
  if (!cpu::attention_onednn_usable()) GTEST_SKIP() << "no oneDNN bf16 matmul / AVX512-BF16: " << cpu::onednn_bf16_impl();
  std::mt19937 rng(7);
  const Tensor q = random_tensor({1, 2, 64, 20}, DType::bf16, rng).transpose(2, 3);  // [1, 2, 20, 64]
  const Tensor k = random_tensor({1, 2, 64, 33}, DType::bf16, rng).transpose(2, 3);
  const Tensor v = random_tensor({1, 2, 64, 33}, DType::bf16, rng).transpose(2, 3);
  reference::Array ref = reference::sdpa(reference::from_tensor(q), reference::from_tensor(k),
                                         reference::from_tensor(v), reference::from_tensor(Tensor()), false, 0);
  reference::round_to(ref, DType::bf16);
  cpu::Tuning t;
  t.attention_kernel = cpu::AttentionKernel::onednn;
  cpu::ScopedTuning scope(t);
  int64_t nans = 0;
  EXPECT_LE(rel_error(ops::sdpa(q, k, v, Tensor(), 0).to_f32_vector(), ref, &nans), 1e-2);
}

// Which tiles run: forced kernels where they can (f32 inputs always on the f32 tiles), and the default
// derived from the CPU the way the dispatch decides: oneDNN's tiles where its bf16 matmul is on AMX,
// else the vdpbf16ps tiles where the CPU has AVX512-BF16, else the f32 tiles.
TEST(SdpaKernelChoice, ForcedAndDefault) {
  cpu::AttentionProblem bf16, f32;
  static const uint8_t some = 0;
  bf16.q.dtype = bf16.k.dtype = bf16.v.dtype = DType::bf16;
  bf16.q.base = bf16.k.base = bf16.v.base = f32.q.base = f32.k.base = f32.v.base = &some;
  auto kernel = [](const cpu::AttentionProblem& p, cpu::AttentionKernel k, cpu::GemmKernel g = cpu::GemmKernel::best) {
    cpu::Tuning t;
    t.attention_kernel = k;
    t.gemm_kernel = g;
    return cpu::attention_kernel_for(p, t);
  };
  using K = cpu::AttentionKernel;
  const bool dot = cpu::bf16_dot_gemm_usable();
  const bool onednn = cpu::onednn_bf16_available() && dot;
  const K fallback = dot ? K::bf16_dot : K::f32;
  EXPECT_EQ(cpu::attention_onednn_usable(), onednn);
  EXPECT_EQ(kernel(bf16, K::f32), K::f32);
  EXPECT_EQ(kernel(bf16, K::bf16_dot), fallback);
  EXPECT_EQ(kernel(bf16, K::onednn), onednn ? K::onednn : fallback);
  for (const K k : {K::best, K::onednn, K::bf16_dot, K::f32}) EXPECT_EQ(kernel(f32, k), K::f32);
  const bool amx = onednn && cpu::onednn_bf16_uses_amx();
  EXPECT_EQ(cpu::attention_onednn_by_default(), amx);
  const bool amx_tiles = cpu::cpu_features().amx_bf16 && cpu::amx_tiles_permitted() && dot;
  EXPECT_EQ(cpu::attention_amx_usable(), amx_tiles);
  EXPECT_EQ(kernel(bf16, K::amx), amx_tiles ? K::amx : fallback);
  EXPECT_EQ(kernel(f32, K::amx), K::f32);
  EXPECT_EQ(kernel(bf16, K::best), amx ? (amx_tiles ? K::amx : K::onednn) : fallback)
      << "default: the AMX tiles exactly where oneDNN's bf16 matmul runs on AMX (" << cpu::onednn_bf16_impl()
      << ") and this process may use AMX";
  // Their larger default tiles come with them (unless DIFFQ_ATTENTION_KERNEL chose other tiles).
  if (std::getenv("DIFFQ_ATTENTION_KERNEL") == nullptr) {
    EXPECT_EQ(cpu::current_tuning().attn_bq, amx ? cpu::kOnednnAttentionBq : cpu::Tuning{}.attn_bq);
    EXPECT_EQ(cpu::current_tuning().attn_bk, amx ? cpu::kOnednnAttentionBk : cpu::Tuning{}.attn_bk);
  }
  EXPECT_EQ(kernel(bf16, K::best, cpu::GemmKernel::diffq_widen), K::f32);
  EXPECT_NE(cpu::attention_kernel_name(cpu::Tuning{})
                .find(amx ? (amx_tiles ? "AMX tiles" : "oneDNN") : dot ? "vdpbf16ps" : "f32 tiles"),
            std::string::npos);
  // Forced oneDNN tiles on real bf16 inputs give other bits than the vdpbf16ps tiles only through the
  // products' summation order; both are within the bf16 tolerance (SdpaOnednn).
  if (!amx && onednn) {
    cpu::Tuning t;
    t.attention_kernel = K::onednn;
    EXPECT_NE(cpu::attention_kernel_name(t).find("oneDNN"), std::string::npos);
  }
}

// Exponents x in [-126, 0] (2^x normal): a fine sweep, the integers and the half-integers.
std::vector<float> exp2_normal_inputs() {
  std::vector<float> x;
  for (float v = 0.f; v >= -126.f; v -= 0.000731f) x.push_back(v);
  for (int i = 0; i <= 126; ++i) x.push_back(-float(i));
  for (int i = 0; i < 126; ++i) x.push_back(-float(i) - 0.5f);
  return x;
}

// The largest distance of y[i] from 2^x[i] in units of the f32 result's last place, over i < count.
double worst_exp2_ulps(const std::vector<float>& x, const std::vector<float>& y, size_t count) {
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = std::exp2(double(x[i]));
    const double ulp = std::nextafter(float(want), INFINITY) - float(want);
    worst = std::max(worst, std::abs(double(y[i]) - want) / ulp);
  }
  return worst;
}

// 2^x for x <= 0: within 1 ulp of the exact value for normal results (x >= -126), 0 below 2^-127,
// exactly 1 at 0. The portable targets (SCALAR, EMU128) have no fused multiply-add: each polynomial
// step rounds twice there, measured 1.16 ulp at worst, so 1.5 is their bound.
TEST(SdpaKernel, Exp2IsWithinOneUlp) {
  const std::string target = cpu::simd_target_chosen();
  const double bound = target == "SCALAR" || target == "EMU128" ? 1.5 : 1.0;
  std::vector<float> x = exp2_normal_inputs();
  const size_t normal = x.size();
  for (const float v : {-127.f, -127.5f, -200.f, -1e30f, -INFINITY}) x.push_back(v);
  std::vector<float> y(x.size());
  cpu::attention_exp2_for_test(x.data(), y.data(), int64_t(x.size()));
  EXPECT_LE(worst_exp2_ulps(x, y, normal), bound) << target;
  for (size_t i = normal; i < x.size(); ++i) EXPECT_EQ(y[i], 0.f) << x[i];
  EXPECT_EQ(y[0], 1.f);
}

// The bf16 tiles' exponential (the vdpbf16ps, oneDNN and AMX tiles' softmax, AVX-512): within 3 ulps of 2^x for normal
// results, exactly 1 at 0, NaN kept; below 2^-126 (x down to -inf) at most the smallest normal (denormal or 0,
// which P's bf16 rounding and the row sums take as nothing).
TEST(SdpaKernel, Bf16TilesExp2IsWithinThreeUlps) {
  if (!cpu::bf16_dot_gemm_usable()) GTEST_SKIP() << "the bf16 tiles need AVX512-BF16 (and AVX-512 F/BW/VL)";
  std::vector<float> x = exp2_normal_inputs();
  const size_t normal = x.size();
  for (const float v : {-126.5f, -127.f, -127.5f, -200.f, -1e30f, -INFINITY}) x.push_back(v);
  const size_t tiny_end = x.size();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  while (x.size() % 16) x.push_back(0.f);
  std::vector<float> y(x.size());
  cpu::attention_bf16_exp2_for_test(x.data(), y.data(), int64_t(x.size()));
  EXPECT_LE(worst_exp2_ulps(x, y, normal), 3.0);
  for (size_t i = normal; i < tiny_end; ++i) {
    EXPECT_GE(y[i], 0.f) << x[i];
    EXPECT_LE(y[i], std::numeric_limits<float>::min()) << x[i];
  }
  EXPECT_TRUE(std::isnan(y[tiny_end]));
  EXPECT_EQ(y[0], 1.f);
}

// Every SIMD target this CPU runs (AVX2 and the portable EMU128 here, AVX-512 where present): the panel
// widths differ (2 vectors of keys / columns), so do the edges.
TEST(SdpaKernel, EveryTargetMatchesTheReference) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (const int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Case& c : {Case{"t_d24_dv40", 1, 2, 19, 45, 24, 40},
                          Case{"t_masked", 2, 2, 9, 70, 16, 20, DType::f32, MaskKind::additive},
                          Case{"t_bf16", 1, 2, 30, 60, 64, 64, DType::bf16}})
      expect_matches_reference(c, {{0, 0}, {7, 33}});
    std::vector<float> x = {0.f, -0.25f, -1.f, -10.3f, -126.f, -127.f, -INFINITY}, y(x.size());
    cpu::attention_exp2_for_test(x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(y[i], std::exp2(double(x[i])), 2e-7 * std::exp2(double(x[i]))) << x[i];
    EXPECT_EQ(y[5], 0.f);
    EXPECT_EQ(y[6], 0.f);
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the CPU's own targets
}

}  // namespace
