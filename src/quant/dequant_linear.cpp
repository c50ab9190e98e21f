#include "quant/dequant_linear.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threads.h"
#include "diffq/error.h"

namespace diffq::quant {

namespace cpu = backend::cpu;

int64_t dequant_tile_rows(int64_t N, int64_t K) {
  // About 16 MiB of f32 per tile (as gemm_bf16's widened blocks): wide enough that the GEMM runs at
  // full speed (narrow tiles of ~170 rows cost the weight-only schemes ~1.5x), still a small fraction
  // of a large weight (FLUX.1's 3072 x 12288 is 144 MiB in f32). A multiple of 16 rows.
  const int64_t cap = std::max<int64_t>(16, (int64_t(1) << 22) / std::max<int64_t>(K, 1) / 16 * 16);
  return std::min(N, cap);
}

Tensor dequant_tile_linear(const Tensor& x, const Tensor& bias, int64_t N, int64_t K, const DequantRows& dequant_rows) {
  check(x.dim() >= 1 && x.shape().back() == K, "quant.linear", "input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", K);
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "quant.linear",
        "input dtype ", dtype_name(x.dtype()), " is not float32, bfloat16 or float16");
  check(x.device().is_cpu(), "quant.linear", "the CPU quantized linear got a tensor on ", x.device().str());
  if (bias.defined())
    check(bias.dim() == 1 && bias.shape()[0] == N, "quant.linear", "bias must be [", N, "]");
  const Tensor xf = x.to(DType::f32).contiguous();
  const int64_t M = xf.numel() / std::max<int64_t>(K, 1);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  const float* xp = xf.data<float>();

  const int64_t tn = dequant_tile_rows(N, K);
  static thread_local std::vector<float> tile;
  tile.resize(size_t(tn * K));
  for (int64_t n0 = 0; n0 < N; n0 += tn) {
    const int64_t n1 = std::min(N, n0 + tn);
    float* tp = tile.data();
    // Dequantize the tile in parallel (16-row chunks), then one multithreaded GEMM consumes it.
    cpu::parallel_for(n1 - n0, 16, [&](int64_t r0, int64_t r1) { dequant_rows(n0 + r0, n0 + r1, tp + r0 * K); });
    if (M > 0) cpu::sgemm(false, true, M, n1 - n0, K, 1.0f, xp, K, tp, K, 0.0f, yp + n0, N);
  }
  if (bias.defined()) {
    const Tensor bf = bias.to(DType::f32).contiguous();
    const float* bp = bf.data<float>();
    cpu::parallel_for(M, 64, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = 0; n < N; ++n) yp[m * N + n] += bp[n];
    });
  }
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

}  // namespace diffq::quant
