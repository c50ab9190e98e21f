#include "backend/cpu/quant/tile_linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/tuning.h"
#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

using quant::DequantRows;
using quant::TileLinearPlan;

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

namespace {

// dst[i] = the bf16 bits of src[i] for i < n; false when some value is not exactly a bf16 (then dst is
// not usable).
bool to_bf16_exact(const float* src, uint16_t* dst, int64_t n) {
  uint32_t low = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], 4);
    low |= u & 0xffffu;
    dst[i] = uint16_t(u >> 16);
  }
  return low == 0;
}

}  // namespace

void tile_linear_parts(const TileLinearPlan& p, const GemmParts& parts, bool round) {
  validate(p);
  const int64_t N = p.N, K = p.K;
  const int64_t M = p.x.numel() / std::max<int64_t>(K, 1);
  if (M == 0 || N == 0) return;
  Tensor bf;
  if (p.bias.defined()) bf = p.bias.to(DType::f32).contiguous();
  const float* bp = bf.defined() ? bf.data<float>() : nullptr;
  const DType rd = round ? p.x.dtype() : DType::f32;

  const int64_t tn = dequant_tile_rows(N, K);
  // A bf16 input where the bf16 GEMM is native: a tile whose dequantized values are all exact bf16 (the
  // schemes that round W to a bf16 compute dtype: GGUF, bitsandbytes 4-bit) runs the bf16 GEMM on the
  // same products (f32 accumulation); any other tile the f32 GEMM.
  const bool try_bf16 = p.x.dtype() == DType::bf16 && gemm_bf16_native(M, tn, current_tuning());
  const Tensor x16 = try_bf16 ? p.x.contiguous() : Tensor();
  Tensor xf;  // f32 x, made when a tile needs it
  // (64-byte aligned: the GEMMs' tile loads read unaligned rows at two cache lines each)
  static thread_local AlignedBuffer<float> tile;
  static thread_local AlignedBuffer<uint16_t> tile16;
  float* const tp = tile.get(size_t(tn * K));
  uint16_t* const tp16 = try_bf16 ? tile16.get(size_t(tn * K)) : nullptr;
  for (int64_t n0 = 0; n0 < N; n0 += tn) {
    const int64_t n1 = std::min(N, n0 + tn);
    // Dequantize the tile in parallel (16-row chunks), then one multithreaded GEMM consumes it, part by
    // part: the parts are columns [n0, n1) of y.
    const int64_t chunks = (n1 - n0 + 15) / 16;
    std::vector<char> inexact(size_t(chunks), 0);
    core::parallel_for(n1 - n0, 16, [&](int64_t r0, int64_t r1) {
      p.dequant_rows(n0 + r0, n0 + r1, tp + r0 * K);
      if (try_bf16)
        for (int64_t c0 = r0; c0 < r1; c0 += 16) {
          const int64_t c1 = std::min(r1, c0 + 16);
          inexact[size_t(c0 / 16)] = !to_bf16_exact(tp + c0 * K, tp16 + c0 * K, (c1 - c0) * K);
        }
    });
    const bool bf16_tile = try_bf16 && std::find(inexact.begin(), inexact.end(), 1) == inexact.end();
    GemmParts shifted;
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
    if (bf16_tile) {
      gemm_bf16_parts(false, true, M, n1 - n0, K, 1.0f, x16.data<uint16_t>(), K, tp16, K, 0.0f, shifted);
    } else {
      if (!xf.defined()) xf = p.x.to(DType::f32).contiguous();
      sgemm_parts(false, true, M, n1 - n0, K, 1.0f, xf.data<float>(), K, tp, K, 0.0f, shifted);
    }
  }
}

Tensor run_tile_linear(const TileLinearPlan& p) {
  validate(p);
  Shape out_shape = p.x.shape();
  out_shape.back() = p.N;
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  const int64_t N = p.N;
  GemmParts parts;
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

}  // namespace diffq::backend::cpu
