// GPU checks beyond the op table for the kernels of group_norm.cu, channel_norm.cu, embedding.cu and
// the integer paths of binary.cu / elementwise.cu: the errors a kernel can only find on the device
// (an embedding id outside the table, an integer division by zero) come back as diffq errors with the
// CPU's words; VAE-sized group_norm / channel_norm (many chunks per group, many pixels) against the CPU
// backend; a norm weight kept as [1, 1, n] reads like its [n] form (it read element 0 everywhere
// before strided.cuh's fix); integer pow exact past 2^53 as the CPU's glibc pow.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;

namespace {

double max_rel_diff(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to(Device::cpu()).to_f64_vector(), w = want.to(Device::cpu()).to_f64_vector();
  double d = 0, top = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    d = std::max(d, std::fabs(g[i] - w[i]));
    top = std::max(top, std::fabs(w[i]));
  }
  return d / std::max(top, 1e-30);
}

TEST(CudaEmbedding, IdOutsideTheTableIsAClearError) {
  DIFFQ_REQUIRE_GPU();
  const Tensor table = random_values({5, 8}, DType::bf16, 1).to(gpu());
  const Tensor ids = Tensor::from_vector(std::vector<float>{1, 4, 7, -1}, {4}, DType::i64).to(gpu());
  try {
    ops::embedding(ids, table);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("embedding"), std::string::npos) << m;
    EXPECT_NE(m.find("id 7 at position 2 is outside the table [0, 5)"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  }
  // The device is still usable, and a good call right after gives the CPU's rows.
  const Tensor good = Tensor::from_vector(std::vector<float>{4, 0, 4}, {3}, DType::i32);
  EXPECT_EQ(bytes_of(ops::embedding(good.to(gpu()), table).to(Device::cpu())),
            bytes_of(ops::embedding(good, table.to(Device::cpu()))));
}

TEST(CudaBinary, IntegerDivisionByZeroIsAClearError) {
  DIFFQ_REQUIRE_GPU();
  const Tensor a = Tensor::from_vector(std::vector<float>{6, -7, 8}, {3}, DType::i32).to(gpu());
  const Tensor b = Tensor::from_vector(std::vector<float>{2, 0, -1}, {3}, DType::i32).to(gpu());
  try {
    ops::div(a, b);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("integer division by zero"), std::string::npos) << e.what();
  }
  // Truncation toward zero and the -1 divisor (INT_MIN / -1 wraps instead of trapping).
  const Tensor x = Tensor::from_vector(std::vector<float>{-7, 7, -9e18f, 5}, {4}, DType::i64);
  const Tensor y = Tensor::from_vector(std::vector<float>{2, -2, -1, 5}, {4}, DType::i64);
  EXPECT_EQ(bytes_of(ops::div(x.to(gpu()), y.to(gpu())).to(Device::cpu())), bytes_of(ops::div(x, y)));
}

TEST(CudaScalar, IntegerPowIsTheCpusPastTwoToThe53) {
  DIFFQ_REQUIRE_GPU();
  const Tensor x = Tensor::from_vector(std::vector<float>{3, -3, 7, -2, 0, 1, -1, 10}, {8}, DType::i64);
  for (double e : {0.0, 1.0, 2.0, 3.0, 19.0, 39.0, 41.0, 63.0, 64.0, 0.5, -1.0, 2.5})
    EXPECT_EQ(bytes_of(ops::pow_scalar(x.to(gpu()), e).to(Device::cpu())), bytes_of(ops::pow_scalar(x, e)))
        << "exponent " << e;
}

TEST(CudaGroupNorm, VaeShapesMatchTheCpu) {
  DIFFQ_REQUIRE_GPU();
  // 32 groups of 4 x 96 x 96 elements (18 chunks each), and a batch of two with odd spatial sizes.
  struct S { Shape shape; int64_t groups; DType dt; double tol; };
  for (const S& s : {S{{1, 128, 96, 96}, 32, DType::bf16, 1e-2}, S{{2, 64, 33, 47}, 32, DType::f32, 1e-5}}) {
    const Tensor x = random_values(s.shape, s.dt, 2, 0.0f, 3.0f), w = random_values({s.shape[1]}, s.dt, 3),
                 b = random_values({s.shape[1]}, s.dt, 4);
    const Tensor want = ops::group_norm(x, s.groups, w, b, 1e-6);
    const Tensor got = ops::group_norm(x.to(gpu()), s.groups, w.to(gpu()), b.to(gpu()), 1e-6);
    EXPECT_LE(max_rel_diff(got, want), s.tol) << shape_str(s.shape);
  }
}

TEST(CudaChannelNorm, WanShapeMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  const Tensor x = random_values({1, 96, 2, 40, 52}, DType::bf16, 5), w = random_values({96}, DType::bf16, 6);
  const Tensor want = ops::channel_norm(x, w, std::sqrt(96.0), 1e-12);
  const Tensor got = ops::channel_norm(x.to(gpu()), w.to(gpu()), std::sqrt(96.0), 1e-12);
  EXPECT_LE(max_rel_diff(got, want), 1e-2);
}

TEST(CudaNorm, WeightWithLeadingSizeOneDimsReadsLikeItsFlatForm) {
  DIFFQ_REQUIRE_GPU();
  const Tensor x = random_values({3, 4, 64}, DType::f32, 7).to(gpu());
  const Tensor w = random_values({64}, DType::f32, 8).to(gpu()), b = random_values({64}, DType::f32, 9).to(gpu());
  EXPECT_EQ(bytes_of(ops::rms_norm(x, w.view({1, 1, 64}), 1e-6).to(Device::cpu())),
            bytes_of(ops::rms_norm(x, w, 1e-6).to(Device::cpu())));
  EXPECT_EQ(bytes_of(ops::layer_norm(x, w.view({1, 1, 64}), b.view({1, 64}), 1e-6).to(Device::cpu())),
            bytes_of(ops::layer_norm(x, w, b, 1e-6).to(Device::cpu())));
}

}  // namespace
