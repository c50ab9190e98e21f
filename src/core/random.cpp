// See random.h for the algorithm. The float operations below follow torch's AVX2 kernel as its
// release build executes it: GCC compiles avx_mathfun.h's _mm256_mul_ps/_mm256_add_ps pairs with
// -mfma -ffp-contract=fast, so a product whose only use is an addition becomes one fused multiply-add
// (Horner steps, the Cody-Waite range reduction, the e*ln2 terms). Those places use std::fma; every
// other operation is a separate float operation, which the pragma below keeps unfused here. Without
// the FMAs about 6 of 1024 values differ by 1 ulp from torch.
#include "core/random.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>

#include "diffq/error.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace diffq {

Generator& Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(static_cast<uint32_t>(seed & 0xffffffffu));
  next_double_normal_sample.reset();
  return *this;
}

uint64_t Generator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

namespace random_detail {
namespace {

// Float constants as torch's headers build them: a double literal rounded to float.
constexpr float f(double v) { return static_cast<float>(v); }
inline uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
// _mm256_cvttps_epi32: truncation toward zero (inputs here are small and non-negative).
inline int32_t cvtt(float x) { return static_cast<int32_t>(x); }

}  // namespace

float cephes_logf(float x) {
  const bool invalid = x <= 0.0f;  // _CMP_LE_OS: false for NaN
  int32_t exponent = static_cast<int32_t>(bits(x) >> 23);
  float m = from_bits((bits(x) & ~0x7f800000u) | bits(0.5f));  // mantissa in [0.5, 1)
  exponent -= 0x7f;
  float e = static_cast<float>(exponent);
  e = e + 1.0f;
  const bool below = m < f(0.707106781186547524);
  const float tmp0 = below ? m : 0.0f;
  m = m - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  m = m + tmp0;
  const float z = m * m;
  float y = f(7.0376836292E-2);
  y = std::fma(y, m, f(-1.1514610310E-1));
  y = std::fma(y, m, f(1.1676998740E-1));
  y = std::fma(y, m, f(-1.2420140846E-1));
  y = std::fma(y, m, f(1.4249322787E-1));
  y = std::fma(y, m, f(-1.6668057665E-1));
  y = std::fma(y, m, f(2.0000714765E-1));
  y = std::fma(y, m, f(-2.4999993993E-1));
  y = std::fma(y, m, f(3.3333331174E-1));
  y = y * m;
  const float eq1 = e * f(-2.12194440e-4);
  y = std::fma(y, z, eq1);
  y = std::fma(-z, 0.5f, y);
  m = m + y;
  m = std::fma(e, f(0.693359375), m);
  if (invalid) return std::bit_cast<float>(bits(m) | 0xffffffffu);  // NaN, as the or with the mask
  return m;
}

void cephes_sincosf(float x, float* s, float* c) {
  uint32_t sign_sin = bits(x) & 0x80000000u;
  x = from_bits(bits(x) & 0x7fffffffu);
  float y = x * f(1.27323954473516);  // 4 / pi
  int32_t j = cvtt(y);
  j = (j + 1) & ~1;
  y = static_cast<float>(j);
  const uint32_t swap_sign_sin = static_cast<uint32_t>(j & 4) << 29;
  const bool poly_mask = (j & 2) == 0;
  // Extended precision modular arithmetic: x = ((x - y DP1) - y DP2) - y DP3.
  x = std::fma(y, f(-0.78515625), x);
  x = std::fma(y, f(-2.4187564849853515625e-4), x);
  x = std::fma(y, f(-3.77489497744594108e-8), x);
  const uint32_t sign_cos = (static_cast<uint32_t>(~(j - 2)) & 4u) << 29;
  sign_sin ^= swap_sign_sin;

  const float z = x * x;
  float yc = f(2.443315711809948E-005);
  yc = std::fma(yc, z, f(-1.388731625493765E-003));
  yc = std::fma(yc, z, f(4.166664568298827E-002));
  yc = yc * z;
  const float half_z = z * 0.5f;
  yc = std::fma(yc, z, -half_z);
  yc = yc + 1.0f;

  float ys = f(-1.9515295891E-4);
  ys = std::fma(ys, z, f(8.3321608736E-3));
  ys = std::fma(ys, z, f(-1.6666654611E-1));
  ys = ys * z;
  ys = std::fma(ys, x, x);

  // Blend exactly as the vector code: masked parts, subtract them, add the pairs.
  const float ysin2 = poly_mask ? ys : 0.0f;
  const float ysin1 = poly_mask ? 0.0f : yc;
  ys = ys - ysin2;
  yc = yc - ysin1;
  const float sin_v = ysin1 + ysin2;
  const float cos_v = yc + ys;
  *s = from_bits(bits(sin_v) ^ sign_sin);
  *c = from_bits(bits(cos_v) ^ sign_cos);
}

}  // namespace random_detail

namespace {

inline float uniform_f32(Generator& gen) {
  return static_cast<float>(gen.random() & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}

inline double uniform_f64(Generator& gen) {
  return static_cast<double>(gen.random64() & ((uint64_t{1} << 53) - 1)) *
         (1.0 / 9007199254740992.0);
}

// Box-Muller on 16 uniforms in place (torch's NormalFill16<float> with mean 0, std 1).
void normal_fill_16(float* d) {
  const float two_pi = static_cast<float>(2.0f * std::numbers::pi_v<double>);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * random_detail::cephes_logf(u1));
    const float theta = two_pi * u2;
    float s, c;
    random_detail::cephes_sincosf(theta, &s, &c);
    // fma(n, std=1, mean=0) == n + 0: turns -0 into +0 like the kernel does.
    d[j] = radius * c + 0.0f;
    d[j + 8] = radius * s + 0.0f;
  }
}

// torch's generic NormalFill16<float>: libm in float, theta computed in double then rounded.
void normal_fill_16_scalar(float* d) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = static_cast<float>(2.0f * std::numbers::pi_v<double> * u2);
    d[j] = std::fma(radius * std::cos(theta), 1.0f, 0.0f);
    d[j + 8] = std::fma(radius * std::sin(theta), 1.0f, 0.0f);
  }
}

double normal_double(Generator& gen) {
  if (gen.next_double_normal_sample) {
    const double v = *gen.next_double_normal_sample;
    gen.next_double_normal_sample.reset();
    return v * 1.0 + 0.0;  // transformation::normal(v, mean 0, std 1)
  }
  const double u1 = uniform_f64(gen);
  const double u2 = uniform_f64(gen);
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * std::numbers::pi_v<double> * u1;
  gen.next_double_normal_sample = r * std::sin(theta);
  return r * std::cos(theta) * 1.0 + 0.0;
}

}  // namespace

void randn_f32(float* out, int64_t n, Generator& gen, RandnKernel kernel) {
  void (*const fill16)(float*) =
      kernel == RandnKernel::avx2 ? normal_fill_16 : normal_fill_16_scalar;
  check(n >= 0, "randn", "negative element count ", n);
  if (n < 16) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(normal_double(gen));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_f32(gen);
  for (int64_t i = 0; i + 16 <= n; i += 16) fill16(out + i);
  if (n % 16 != 0) {
    float* tail = out + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_f32(gen);
    fill16(tail);
  }
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, RandnKernel kernel) {
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "randn",
        "dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  for (int64_t s : shape) check(s >= 0, "randn", "negative dimension ", s);
  Tensor t = Tensor::empty(shape, DType::f32);
  randn_f32(t.data<float>(), t.numel(), gen, kernel);
  // torch rounds the float draw once (bf16/f16 scalar path: double -> float -> half, same thing,
  // since c10's BFloat16/Half constructors take a float).
  return dtype == DType::f32 ? t : t.to(dtype);
}

Tensor randn_tensor(const Shape& shape, Generator& gen, DType dtype) {
  return randn(shape, gen, dtype);
}

Tensor randn_tensor(const Shape& shape, std::vector<Generator>& gens, DType dtype) {
  check(!shape.empty(), "randn_tensor", "a list of generators needs a batch dimension");
  check(int64_t(gens.size()) == shape[0], "randn_tensor", "got ", gens.size(),
        " generators for a batch of ", shape[0]);
  if (gens.size() == 1) return randn(shape, gens[0], dtype);
  Shape one = shape;
  one[0] = 1;
  Tensor out = Tensor::empty(shape, dtype);
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (auto& g : gens) {
    Tensor part = randn(one, g, dtype);
    std::memcpy(dst, part.data_ptr(), part.nbytes());
    dst += part.nbytes();
  }
  return out;
}

}  // namespace diffq
