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

namespace {

void validate(const TileLinearPlan& p) {
  const Tensor& x = p.x;
  check(x.dim() >= 1 && x.shape().back() == p.K, "quant.linear", "input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", p.K);
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "quant.linear",
        "input dtype ", dtype_name(x.dtype()), " is not float32, bfloat16 or float16");
  check(x.device().is_cpu(), "quant.linear", "the CPU quantized linear got a tensor on ", x.device().str());
  if (p.bias.defined())
    check(p.bias.dim() == 1 && p.bias.shape()[0] == p.N, "quant.linear", "bias must be [", p.N, "]");
}

}  // namespace

void tile_linear_parts(const TileLinearPlan& p, const cpu::GemmParts& parts, bool round) {
  validate(p);
  const int64_t N = p.N, K = p.K;
  const Tensor xf = p.x.to(DType::f32).contiguous();
  const int64_t M = xf.numel() / std::max<int64_t>(K, 1);
  if (M == 0 || N == 0) return;
  const float* xp = xf.data<float>();
  Tensor bf;
  if (p.bias.defined()) bf = p.bias.to(DType::f32).contiguous();
  const float* bp = bf.defined() ? bf.data<float>() : nullptr;
  const DType rd = round ? p.x.dtype() : DType::f32;

  const int64_t tn = dequant_tile_rows(N, K);
  static thread_local std::vector<float> tile;
  tile.resize(size_t(tn * K));
  for (int64_t n0 = 0; n0 < N; n0 += tn) {
    const int64_t n1 = std::min(N, n0 + tn);
    float* tp = tile.data();
    // Dequantize the tile in parallel (16-row chunks), then one multithreaded GEMM consumes it, part by
    // part: the parts are columns [n0, n1) of y.
    cpu::parallel_for(n1 - n0, 16, [&](int64_t r0, int64_t r1) { p.dequant_rows(n0 + r0, n0 + r1, tp + r0 * K); });
    cpu::GemmParts shifted;
    shifted.begin = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) {
      return parts.begin(r0, r1, n0 + c0, n0 + c1, ld);
    };
    shifted.end = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t ld) {
      // The part is the buffer parts.begin handed out for these rows and columns: writable.
      float* w = const_cast<float*>(part);
      if (bp || rd != DType::f32)
        for (int64_t r = 0; r < r1 - r0; ++r)
          for (int64_t c = 0; c < c1 - c0; ++c)
            w[r * ld + c] = round_through(rd, bp ? w[r * ld + c] + bp[n0 + c0 + c] : w[r * ld + c]);
      parts.end(r0, r1, n0 + c0, n0 + c1, part, ld);
    };
    cpu::sgemm_parts(false, true, M, n1 - n0, K, 1.0f, xp, K, tp, K, 0.0f, shifted);
  }
}

Tensor run_tile_linear(const TileLinearPlan& p) {
  validate(p);
  Shape out_shape = p.x.shape();
  out_shape.back() = p.N;
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  const int64_t N = p.N;
  cpu::GemmParts parts;
  parts.begin = [&](int64_t r0, int64_t, int64_t c0, int64_t, int64_t* ld) {
    *ld = N;
    return yp + r0 * N + c0;
  };
  parts.end = [](int64_t, int64_t, int64_t, int64_t, const float*, int64_t) {};
  tile_linear_parts(p, parts);
  return p.x.dtype() == DType::f32 ? y : y.to(p.x.dtype());
}

Tensor dequant_tile_linear(const Tensor& x, const Tensor& bias, int64_t N, int64_t K, const DequantRows& dequant_rows) {
  return run_tile_linear({x, bias, N, K, dequant_rows});
}

}  // namespace diffq::quant
