// Host checks of the CUDA kernels' indexing (no GPU needed; these run wherever test_cuda builds):
// the strided views the kernels walk (make_views + offset_of, the same code nvcc compiles for the
// device) read every tensor layout the op table uses in row-major order, including the permuted
// pairs of softmax and reduce and the output slices of concat; and the cuBLASLt layouts of
// gemm_plan.h, evaluated as the column-major product cuBLASLt defines, give the row-major linear and
// matmul results.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/strided.cuh"
#include "diffq/tensor.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::backend::cuda;

namespace {

Tensor arange(const Shape& s, float first = 0.0f) { return cudatest::arange_f32(s, first); }

// Reading each tensor through its view (as a kernel does, from data_ptr()) gives the tensor's
// elements broadcast to `shape`, in row-major order.
void expect_views_read(const Shape& shape, const std::vector<const Tensor*>& ts, const char* what) {
  const std::vector<StridedView> v = make_views(shape, ts, what);
  for (size_t k = 0; k < ts.size(); ++k) {
    const std::vector<float> want = ts[k]->expand(shape).contiguous().to_f32_vector();
    const float* base = static_cast<const float*>(ts[k]->data_ptr());
    for (int64_t i = 0; i < shape_numel(shape); ++i)
      ASSERT_EQ(base[v[k].offset_of(i)], want[size_t(i)]) << what << ", tensor " << k << ", element " << i;
  }
}

TEST(CudaIndexing, ViewsReadEveryLayoutInRowMajorOrder) {
  const Tensor a = arange({3, 4, 5}), b = arange({2, 3, 4, 5});
  expect_views_read({3, 4, 5}, {&a}, "contiguous");
  const Tensor t = a.transpose(1, 2), p = a.permute({2, 0, 1}), s = arange({3, 4, 11}).slice(2, 1, 11, 2);
  expect_views_read(t.shape(), {&t}, "transposed");
  expect_views_read(p.shape(), {&p}, "permuted");
  expect_views_read(s.shape(), {&s}, "strided");
  const Tensor e = arange({1, 4, 5}).expand({3, 4, 5}), o = arange({65}).slice(0, 5, 65).view({3, 4, 5});
  expect_views_read({3, 4, 5}, {&e, &o}, "expanded + offset");
  const Tensor row = arange({5});
  const Tensor tt = t.transpose(1, 2);
  expect_views_read({3, 4, 5}, {&tt, &row}, "broadcast row");
  const Tensor bp = b.permute({3, 1, 0, 2});
  expect_views_read(bp.shape(), {&bp}, "rank-4 permuted");
}

// softmax over dim d: x and the contiguous output are both permuted so d is last; row r of the
// permuted view must be the elements along d, in both tensors.
TEST(CudaIndexing, SoftmaxAndReducePermutedViews) {
  for (const Tensor& x : {arange({2, 67, 5}), arange({5, 67, 2}).transpose(0, 2), arange({4, 1, 7})})
    for (int64_t dim = 0; dim < 3; ++dim) {
      std::vector<int64_t> perm;
      for (int64_t d = 0; d < 3; ++d)
        if (d != dim) perm.push_back(d);
      perm.push_back(dim);
      // The output's elements distinct from x's and from each other (an uninitialised Tensor::empty
      // compared garbage with itself here: NaN bits failed at random, and no wrong offset was caught).
      const Tensor out = arange(x.shape(), 1000.0f);
      const Tensor xp = x.permute(perm), op = out.permute(perm);
      expect_views_read(xp.shape(), {&xp, &op}, "softmax pair");
    }
  // reduce over dims {0, 2} of [3, 5, 17]: kept dims first, reduced last.
  const Tensor x = arange({3, 5, 17});
  const Tensor xp = x.permute({1, 0, 2});
  expect_views_read(xp.shape(), {&xp}, "reduce");
}

// concat: each input (here a contiguous one and a permuted one) scattered into its output slice
// gives the CPU backend's concat.
TEST(CudaIndexing, ConcatWritesEachInputIntoItsSlice) {
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape s1{2, 3, 4}, s2{4, 3, 2};
    s1[size_t(dim)] = 1;
    s2[size_t(2 - dim)] = 3;  // permuted below, so dim 2 - dim becomes dim
    const Tensor in1 = arange(s1), in2 = ops::add_scalar(arange(s2), 100.0).permute({2, 1, 0});
    Shape so = s1;
    so[size_t(dim)] = 4;
    Tensor out = ops::add_scalar(Tensor::zeros(so, DType::f32), -1.0);
    int64_t at = 0;
    for (const Tensor* in : {&in1, &in2}) {
      Tensor part = out.slice(dim, at, at + in->size(dim));
      const std::vector<StridedView> v = make_views(in->shape(), {in, &part}, "concat");
      const float* src = static_cast<const float*>(in->data_ptr());
      float* dst = static_cast<float*>(part.data_ptr());
      for (int64_t i = 0; i < in->numel(); ++i) dst[v[1].offset_of(i)] = src[v[0].offset_of(i)];
      at += in->size(dim);
    }
    EXPECT_EQ(out.to_f32_vector(), ops::concat({in1, in2}, dim).to_f32_vector()) << "dim " << dim;
  }
}

// The column-major product cuBLASLt computes with a plan's layouts: D = op(A) * B.
std::vector<float> lt_product(const GemmPlan& p, const std::vector<float>& a, const std::vector<float>& b) {
  const uint64_t m = p.d.rows, n = p.d.cols, k = p.trans_a ? p.a.rows : p.a.cols;
  EXPECT_EQ(p.b.rows, k);
  EXPECT_EQ(p.trans_a ? p.a.cols : p.a.rows, m);
  std::vector<float> d(size_t(p.batch) * m * n);
  for (int64_t q = 0; q < p.batch; ++q)
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (uint64_t l = 0; l < k; ++l) {
          const float av = p.trans_a ? a[size_t(q * p.a.batch_stride + int64_t(l) + int64_t(i) * p.a.ld)]
                                     : a[size_t(q * p.a.batch_stride + int64_t(i) + int64_t(l) * p.a.ld)];
          acc += double(av) * b[size_t(q * p.b.batch_stride + int64_t(l) + int64_t(j) * p.b.ld)];
        }
        d[size_t(q * p.d.batch_stride + int64_t(i) + int64_t(j) * p.d.ld)] = float(acc);
      }
  return d;
}

TEST(CudaIndexing, GemmPlanGivesRowMajorLinearAndMatmul) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-4, 4);
  auto rand = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = float(u(rng));
    return v;
  };
  struct S { int64_t M, N, K, batch; };
  for (S s : {S{1, 1, 1, 1}, S{3, 5, 17, 1}, S{67, 19, 33, 1}, S{5, 7, 6, 4}, S{17, 9, 33, 2}}) {
    for (bool w_nk : {true, false}) {
      const bool w_batched = !w_nk && s.batch > 1;
      if (s.batch > 1 && !w_batched) continue;
      const std::vector<float> x = rand(size_t(s.batch * s.M * s.K));
      const std::vector<float> w = rand(size_t((w_batched ? s.batch : 1) * s.N * s.K));
      const GemmPlan p = plan_gemm(s.M, s.N, s.K, w_nk, w_batched, s.batch);
      const std::vector<float> d = lt_product(p, w, x);  // cuBLASLt's A is the weight, B the activation
      for (int64_t q = 0; q < s.batch; ++q)
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) {
            double want = 0;
            const int64_t wq = w_batched ? q * s.N * s.K : 0;
            for (int64_t l = 0; l < s.K; ++l)
              want += double(x[size_t(q * s.M * s.K + i * s.K + l)]) *
                      (w_nk ? w[size_t(wq + j * s.K + l)] : w[size_t(wq + l * s.N + j)]);
            ASSERT_EQ(d[size_t(q * s.M * s.N + i * s.N + j)], float(want))
                << "M=" << s.M << " N=" << s.N << " K=" << s.K << " batch=" << s.batch << " w_nk=" << w_nk;
          }
    }
  }
}

}  // namespace
