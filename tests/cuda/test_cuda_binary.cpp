// The CUDA binary op (add, sub, mul, div, maximum, minimum) against two references: a scalar one here
// (f32 math rounded once to the output dtype: exact, since these are single IEEE operations) and the
// CPU backend's kernel when this build has one (within the design's tolerance: 1e-4 relative for
// f32, 1e-2 for bf16/f16).
#include <algorithm>
#include <cmath>

#include "diffq/error.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;
using ops::BinaryFn;

namespace {

float apply(BinaryFn fn, float a, float b) {
  switch (fn) {
    case BinaryFn::add: return a + b;
    case BinaryFn::sub: return a - b;
    case BinaryFn::mul: return a * b;
    case BinaryFn::div: return a / b;
    case BinaryFn::maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryFn::minimum: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  }
  return 0;
}

Tensor run(BinaryFn fn, const Tensor& a, const Tensor& b) {
  switch (fn) {
    case BinaryFn::add: return ops::add(a, b);
    case BinaryFn::sub: return ops::sub(a, b);
    case BinaryFn::mul: return ops::mul(a, b);
    case BinaryFn::div: return ops::div(a, b);
    case BinaryFn::maximum: return ops::maximum(a, b);
    case BinaryFn::minimum: return ops::minimum(a, b);
  }
  return {};
}

// The scalar reference on CPU tensors: broadcast, compute in f32, round to a's dtype.
std::vector<float> reference(BinaryFn fn, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "test");
  const std::vector<float> x = a.expand(shape).to_f32_vector(), y = b.expand(shape).to_f32_vector();
  std::vector<float> r(x.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = apply(fn, x[i], y[i]);
  return Tensor::from_vector(r, shape, a.dtype()).to_f32_vector();
}

bool same_value(float u, float v) { return (std::isnan(u) && std::isnan(v)) || u == v; }

struct Case {
  const char* name;
  Shape a_shape, b_shape;
  DType a_dtype, b_dtype;
  bool transpose_a;  // feed a as a transposed (non-contiguous) view
};

const Case kCases[] = {
    {"same_shape_f32", {4, 37, 65}, {4, 37, 65}, DType::f32, DType::f32, false},
    {"broadcast_f32", {4, 1, 65}, {37, 1}, DType::f32, DType::f32, false},
    {"row_bias_bf16", {3, 129}, {129}, DType::bf16, DType::bf16, false},
    {"strided_f32", {33, 20}, {20, 33}, DType::f32, DType::f32, true},
    {"strided_bcast_f16", {17, 9}, {1, 17}, DType::f16, DType::f16, true},
    {"mixed_bf16_f32", {5, 64}, {5, 64}, DType::bf16, DType::f32, false},
    {"scalar_rhs_f32", {1000}, {}, DType::f32, DType::f32, false},
};

}  // namespace

TEST(CudaBinary, MatchesScalarReferenceAndCpu) {
  DIFFQ_REQUIRE_GPU();
  const bool have_cpu = ops::find_kernel(ops::OpKind::binary, DeviceKind::cpu) != nullptr;
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    Tensor a = random_values(c.a_shape, c.a_dtype, seed++);
    const Tensor b = random_values(c.b_shape, c.b_dtype, seed++);
    if (c.transpose_a) a = a.transpose(0, 1);  // logical shape [20, 33] / [9, 17]
    for (int f = 0; f <= int(BinaryFn::minimum); ++f) {
      const auto fn = static_cast<BinaryFn>(f);
      SCOPED_TRACE(std::string(c.name) + " fn " + std::to_string(f));
      const Tensor out = run(fn, a.to(gpu()), b.to(gpu()));
      ASSERT_EQ(out.device(), gpu());
      EXPECT_EQ(out.dtype(), a.dtype());
      EXPECT_EQ(out.shape(), broadcast_shapes(a.shape(), b.shape(), "test"));
      const std::vector<float> got = out.to_f32_vector(), want = reference(fn, a, b);
      ASSERT_EQ(got.size(), want.size());
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += !same_value(got[i], want[i]);
      EXPECT_EQ(bad, 0u) << "elements differing from the scalar reference";
      if (have_cpu && a.dtype() == b.dtype()) {  // mixed dtypes: the CPU's rules may differ
        const std::vector<float> cpu = run(fn, a, b).to_f32_vector();
        const double tol = a.dtype() == DType::f32 ? 1e-4 : 1e-2;
        double scale = 1e-30, err = 0;
        for (size_t i = 0; i < cpu.size(); ++i) {
          scale = std::max(scale, double(std::fabs(cpu[i])));
          err = std::max(err, double(std::fabs(got[i] - cpu[i])));
        }
        EXPECT_LE(err / scale, tol) << "max relative error against the CPU backend";
      }
    }
  }
}

TEST(CudaBinary, MaximumMinimumPropagateNaN) {
  DIFFQ_REQUIRE_GPU();
  const Tensor a = Tensor::from_vector({NAN, 1.0f, -2.0f, 3.0f}, {4});
  const Tensor b = Tensor::from_vector({0.0f, NAN, 5.0f, -INFINITY}, {4});
  const auto mx = ops::maximum(a.to(gpu()), b.to(gpu())).to_f32_vector();
  const auto mn = ops::minimum(a.to(gpu()), b.to(gpu())).to_f32_vector();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], 5.0f);
  EXPECT_EQ(mx[3], 3.0f);
  EXPECT_EQ(mn[2], -2.0f);
  EXPECT_EQ(mn[3], -INFINITY);
}

TEST(CudaBinary, InputsOnDifferentDevicesAreAnError) {
  DIFFQ_REQUIRE_GPU();
  const Tensor a = Tensor::full({3}, 1.0, DType::f32);
  EXPECT_THROW(ops::add(a, a.to(gpu())), Error);
}
