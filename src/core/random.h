// Reproduces PyTorch's CPU random numbers: torch.Generator("cpu").manual_seed(seed) and
// torch.randn(shape, generator=g, dtype=...) as torch 2.15 computes them on an x86 CPU with AVX2 (or,
// on request, with torch's generic kernel), and Diffusers' randn_tensor on top. Same seed, same noise.
//
// The algorithm (facts from ATen's CPUGeneratorImpl, DistributionsHelper.h, TransformationHelper.h,
// native/cpu/DistributionTemplates.h and avx_mathfun.h):
// - The engine is the standard 32-bit Mersenne Twister seeded with the low 32 bits of the 64-bit seed
//   (identical to std::mt19937). random64() takes two draws, the first one as the high half.
// - numel >= 16 (contiguous): uniforms u = (draw & (2^24-1)) * 2^-24 as float; blocks of 16: for
//   j < 8, u1 = 1 - u[j], u2 = u[j+8], r = sqrt(-2 log u1), theta = 2 pi u2, out[j] = r cos theta,
//   out[j+8] = r sin theta. log/sincos are the Cephes-style float polynomials of avx_mathfun.h (what
//   torch's AVX2 kernel runs), evaluated here in scalar float with the same operation order and the
//   same fused multiply-adds as torch's compiled kernel (see random.cpp). float32
//   output: every uniform is drawn first, then the blocks; when numel % 16 != 0 the last 16 outputs
//   are redone from 16 fresh uniforms. bf16/f16: the same values computed in float, then rounded.
// - numel < 16: per element normal_distribution<double>: u1, u2 from random64() (53 bits),
//   r = sqrt(-2 log1p(-u2)), theta = 2 pi u1; returns r cos theta and caches r sin theta in the
//   generator for the next element (cache lives across calls, as in torch).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "diffq/tensor.h"

namespace diffq {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // c10's default_rng_seed_val

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  // torch: resets the engine and clears the cached normal samples.
  Generator& manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  uint32_t random() { return static_cast<uint32_t>(engine_()); }
  uint64_t random64();  // (first draw << 32) | second draw

  // Box-Muller cache of the scalar path (torch's next_double_normal_sample).
  std::optional<double> next_double_normal_sample;

 private:
  uint64_t seed_ = kDefaultSeed;
  std::mt19937 engine_;
};

// Which of torch's Box-Muller kernels (n >= 16) to reproduce. torch picks it by the CPU capability it
// runs with: avx2 = x86 CPUs where torch selects AVX2 (the fixtures' machine; the default here);
// scalar = torch's generic kernel (ATEN_CPU_CAPABILITY=default, non-x86 CPUs, and x86 builds that
// select AVX512), which uses libm's logf/cosf/sinf and differs from avx2 in the last bits.
enum class RandnKernel { avx2, scalar };

// torch.randn(shape, generator=gen, dtype=dtype) on the CPU; dtype f32, bf16 or f16.
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32,
             RandnKernel kernel = RandnKernel::avx2);

// The float32 values of torch.randn of `n` elements (the vectorised path for n >= 16, the scalar path
// below). Writes out[0..n).
void randn_f32(float* out, int64_t n, Generator& gen, RandnKernel kernel = RandnKernel::avx2);

// Diffusers' randn_tensor: one generator -> one randn of the full shape; a list of generators (one per
// batch element) -> randn of shape [1, ...] per generator, concatenated along dim 0.
Tensor randn_tensor(const Shape& shape, Generator& gen, DType dtype = DType::f32);
Tensor randn_tensor(const Shape& shape, std::vector<Generator>& gens, DType dtype = DType::f32);

namespace random_detail {
// The scalar float evaluations of avx_mathfun.h's log256_ps / sincos256_ps (exposed for tests).
float cephes_logf(float x);
void cephes_sincosf(float x, float* s, float* c);
}  // namespace random_detail

}  // namespace diffq
