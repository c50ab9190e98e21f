// Host checks (no GPU needed) of the index maps and statistics the newer CUDA kernels share with the host
// through index_math.cuh and strided.cuh: the same code nvcc compiles into group_norm.cu, upsample.cu
// and embedding.cu, run here on CPU tensors and compared with the CPU backend. Also the broadcast rule
// of make_views for a view with more dims than the shape it is walked over (a norm weight kept as
// [1, 1, n]), which used to wrap around and read element 0 everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/index_math.cuh"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"
#include "diffq/tensor.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::backend::cuda;

namespace {

Tensor arange(const Shape& s, float first = 0.0f) { return cudatest::arange_f32(s, first); }

Tensor normal(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.5f, 2.0f);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, s, DType::f32);
}

// Element i of t's walk over `shape`, read as a kernel does (from data_ptr(), through the view).
std::vector<float> walk(const Tensor& t, const Shape& shape) {
  const StridedView v = make_views(shape, {&t}, "test")[0];
  const float* base = static_cast<const float*>(t.data_ptr());
  std::vector<float> out(size_t(shape_numel(shape)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = base[v.offset_of(int64_t(i))];
  return out;
}

TEST(CudaViews, ExtraLeadingSizeOneDimsAreReadThroughTheTrailingDims) {
  const Tensor w = arange({1, 1, 7}, 10.0f);
  EXPECT_EQ(walk(w, {7}), w.to_f32_vector());  // was 10 everywhere: rank - dim wrapped around
  // Strided and offset views of a [1, 1, n] weight, walked as [n] and broadcast over rows.
  const Tensor s = arange({1, 1, 15}).slice(2, 1, 15, 2);
  EXPECT_EQ(walk(s, {7}), s.contiguous().to_f32_vector());
  const Tensor o = arange({12}).slice(0, 5, 12).view({1, 1, 7});
  EXPECT_EQ(walk(o, {7}), o.contiguous().to_f32_vector());
  const std::vector<float> rows = walk(w, {3, 7});
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i], 10.0f + float(i % 7)) << i;
  // [1, C, 1, 1] walked as [C] would be misaligned (its last dim is 1): right-aligned, it broadcasts
  // only where that is what it means; a size-C trailing dim is the rule.
  const Tensor col = arange({1, 7, 1});
  EXPECT_EQ(walk(col, {7, 1}), col.to_f32_vector());
}

TEST(CudaViews, ViewsThatDoNotBroadcastAreClearErrors) {
  const Tensor w = arange({2, 1, 7});
  try {
    make_views({7}, {&w}, "rms_norm");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("extra leading dim 0 is 2"), std::string::npos) << m;
  }
  const Tensor v = arange({5});
  EXPECT_THROW(make_views({3, 4}, {&v}, "binary"), Error);
}

// group_norm's statistics as the kernels take them: chunks of the plan, two passes per chunk, Chan's
// merge; then the elementwise formula. Equal to the CPU backend within f32 rounding.
Tensor group_norm_on_host(const Tensor& x, int64_t G, const Tensor& w, const Tensor& b, double eps,
                          GroupChunks* plan_out) {
  const int64_t N = x.size(0), C = x.size(1), spatial = x.numel() / (N * C), cg = C / G;
  const int64_t elems = cg * spatial, groups = N * G;
  const std::vector<float> xv = x.contiguous().to_f32_vector(), wv = w.to_f32_vector(), bv = b.to_f32_vector();
  const GroupChunks plan = plan_group_chunks(elems, groups);
  *plan_out = plan;
  std::vector<double> mean(static_cast<size_t>(groups)), rstd(static_cast<size_t>(groups));
  for (int64_t p = 0; p < groups; ++p) {
    Moments m;
    for (int64_t k = 0; k < plan.chunks; ++k) {
      const int64_t begin = p * elems + k * plan.chunk, len = std::min(plan.chunk, elems - k * plan.chunk);
      double s = 0, q = 0;
      for (int64_t j = 0; j < len; ++j) s += xv[size_t(begin + j)];
      const double cm = s / double(len);
      for (int64_t j = 0; j < len; ++j) q += (xv[size_t(begin + j)] - cm) * (xv[size_t(begin + j)] - cm);
      m = combine_moments(m, Moments{double(len), cm, q});
    }
    mean[size_t(p)] = m.mean;
    rstd[size_t(p)] = 1.0 / std::sqrt(m.m2 / m.count + eps);
  }
  std::vector<float> y(xv.size());
  for (int64_t i = 0; i < int64_t(y.size()); ++i) {
    const int64_t nc = i / spatial, c = nc % C, p = (nc / C) * G + c / cg;
    y[size_t(i)] = group_norm_value(xv[size_t(i)], float(mean[size_t(p)]), float(rstd[size_t(p)] * wv[size_t(c)]),
                                    bv[size_t(c)]);
  }
  return Tensor::from_vector(y, x.shape(), DType::f32);
}

TEST(CudaKernelMath, GroupNormChunkedStatisticsMatchTheCpu) {
  struct S { Shape shape; int64_t G; };
  for (const S& s : {S{{2, 6, 5, 7}, 3}, S{{1, 64, 40, 40}, 32}, S{{1, 8, 70, 70}, 2}, S{{1, 1, 1, 1}, 1}}) {
    const Tensor x = normal(s.shape, 7), w = normal({s.shape[1]}, 8), b = normal({s.shape[1]}, 9);
    GroupChunks plan;
    const std::vector<float> got = group_norm_on_host(x, s.G, w, b, 1e-6, &plan).to_f32_vector();
    const std::vector<float> want = ops::group_norm(x, s.G, w, b, 1e-6).to_f32_vector();
    double err = 0, top = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, double(std::fabs(got[i] - want[i])));
      top = std::max(top, double(std::fabs(want[i])));
    }
    EXPECT_LE(err / top, 2e-6) << shape_str(s.shape);
    const int64_t elems = x.numel() / (s.shape[0] * s.G);
    EXPECT_GE(plan.chunk * plan.chunks, elems);
    EXPECT_LT((plan.chunks - 1) * plan.chunk, elems);
  }
}

TEST(CudaKernelMath, GroupChunkPlan) {
  // A VAE's 32 groups of 16 x 128 x 128: 32 chunks each (1024 blocks), none shorter than 2048 elements.
  GroupChunks p = plan_group_chunks(16 * 128 * 128, 32);
  EXPECT_EQ(p.chunks, 32);
  EXPECT_EQ(p.chunk, 8192);
  p = plan_group_chunks(100, 4);  // small groups stay whole
  EXPECT_EQ(p.chunks, 1);
  EXPECT_EQ(p.chunk, 100);
  p = plan_group_chunks(5000, 2000);  // many groups: one block each
  EXPECT_EQ(p.chunks, 1);
  // Merging chunk moments equals the moments of the whole (including an empty side).
  const Moments a{3, 2.0, 8.0}, none{};
  EXPECT_EQ(combine_moments(none, a).m2, 8.0);
  EXPECT_EQ(combine_moments(a, none).mean, 2.0);
  const Moments ab = combine_moments(Moments{2, 1.0, 2.0}, Moments{2, 5.0, 2.0});  // {0, 2, 4, 6}
  EXPECT_EQ(ab.count, 4.0);
  EXPECT_EQ(ab.mean, 3.0);
  EXPECT_EQ(ab.m2, 20.0);
}

TEST(CudaKernelMath, UpsampleSourceOffsetsMatchTheCpu) {
  const Tensor base = arange({2, 3, 4, 5});
  for (const Tensor& x : {base, base.permute({0, 1, 3, 2}).contiguous().transpose(2, 3),
                          arange({2, 3, 4, 11}).slice(3, 1, 11, 2), arange({1, 3, 4, 5}).expand({2, 3, 4, 5}),
                          arange({1, 1, 1, 1})}) {
    Strides4 st;
    for (int d = 0; d < 4; ++d) st.s[d] = x.strides()[size_t(d)];
    const float* src = static_cast<const float*>(x.data_ptr());
    const std::vector<float> want = ops::upsample_nearest2x(x).to_f32_vector();
    for (int64_t i = 0; i < int64_t(want.size()); ++i)
      ASSERT_EQ(src[upsample_source_offset(i, x.size(1), x.size(2), x.size(3), st)], want[size_t(i)])
          << shape_str(x.shape()) << " element " << i;
  }
}

TEST(CudaKernelMath, EmbeddingOffsetsMatchTheCpu) {
  const Tensor ids = Tensor::from_vector(std::vector<float>{3, 0, 2, 2, 1, 3}, {2, 3}, DType::i64);
  for (const Tensor& tab : {arange({4, 5}), arange({5, 4}).transpose(0, 1), arange({4, 11}).slice(1, 1, 11, 2)}) {
    const std::vector<float> want = ops::embedding(ids, tab).to_f32_vector();
    const std::vector<float> idv = ids.to_f32_vector();
    const float* t = static_cast<const float*>(tab.data_ptr());
    const int64_t D = tab.size(1);
    for (int64_t i = 0; i < int64_t(want.size()); ++i)
      ASSERT_EQ(t[embedding_table_offset(int64_t(idv[size_t(i / D)]), i, D, tab.strides()[0], tab.strides()[1])],
                want[size_t(i)])
          << shape_str(tab.shape()) << " element " << i;
  }
}

}  // namespace
