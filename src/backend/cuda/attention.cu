// sdpa on CUDA without an Sq x Sk matrix: one warp per query row walks the keys with an online softmax
// (running max m, sum l, the Dv accumulator rescaled as m grows), as the CPU backend's tiled kernel
// (src/backend/cpu/attention.cpp) does per block. Lanes split the head dim (q and the accumulator
// live in registers: D, Dv <= 256); each score is a warp-shuffle sum. q, k, v and the mask are any
// strided views (float32/float16/bfloat16; the mask additive float or boolean, broadcast to
// [B, H, Sq, Sk]); math in f32, one rounding to the output dtype. A row with every key masked is 0,
// as torch. This is the simple, correct kernel, not the fast one: no tensor cores, keys one at a time.
// It is the reference and fallback of cuDNN's fused flash attention (cudnn_sdpa.cpp), which takes the
// bf16/fp16 unmasked calls first (sdpa_select below; DIFFQ_CUDA_SDPA=simple keeps them here); head dims
// above 256 and large unmasked float32 calls go through GEMMs (sdpa_gemm.cpp).
#include <cmath>
#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/cudnn_info.h"
#include "backend/cuda/cudnn_ops.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kWarps = 4;       // query rows per block
constexpr int kPerLane = 8;     // head-dim elements per lane: D, Dv <= 32 * 8
constexpr int kMaxHeadDim = 32 * kPerLane;

struct Operand4 {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t st[4] = {};  // element strides of [B, H, S, D] (0 on broadcast dims)
  bool boolean = false;

  __device__ __forceinline__ float at(int64_t b, int64_t h, int64_t i, int64_t d) const {
    const int64_t o = b * st[0] + h * st[1] + i * st[2] + d * st[3];
    if (boolean) return static_cast<const uint8_t*>(data)[o] ? 0.0f : -INFINITY;
    return load_f32(data, dtype, o);
  }
};

Operand4 operand(const Tensor& t, bool is_mask) {
  Operand4 r;
  r.data = t.data_ptr();
  r.dtype = t.dtype();
  r.boolean = is_mask && t.dtype() == DType::boolean;
  check(r.boolean || is_kernel_float(t.dtype()), "sdpa", "cuda: ", t.str(),
        " is not supported yet (float32, float16, bfloat16", is_mask ? ", boolean masks" : "", " are)");
  const int64_t lead = 4 - t.dim();  // a mask may have fewer dims: aligned right, broadcast
  check(lead >= 0, "sdpa", "cuda: ", t.str(), " has more than 4 dims");
  for (int64_t i = 0; i < t.dim(); ++i) r.st[lead + i] = t.size(i) == 1 ? 0 : t.strides()[size_t(i)];
  return r;
}

__global__ void sdpa_kernel(Operand4 q, Operand4 k, Operand4 v, Operand4 mask, bool has_mask, void* out,
                            DType ot, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int D, int Dv,
                            float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = B * H * Sq;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t i = row % Sq, h = (row / Sq) % H, b = row / (Sq * H);
    float qr[kPerLane], acc[kPerLane];
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = lane + 32 * t;
      qr[t] = d < D ? q.at(b, h, i, d) : 0.0f;
      acc[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < Sk; ++j) {
      float part = 0.0f;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < D) part = fmaf(qr[t], k.at(b, h, j, d), part);
      }
      for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      float s = part * scale;
      if (has_mask) s += mask.at(b, h, i, j);
      if (s == -INFINITY) continue;  // a masked key adds nothing (every lane sees the same s)
      const float m_new = fmaxf(m, s);
      const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
      const float p = expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < Dv) acc[t] = acc[t] * alpha + p * v.at(b, h, j, d);
      }
      m = m_new;
    }
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;  // l = 0 (every key masked): 0, as torch
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < Dv) store_f32(out, ot, row * Dv + d, acc[t] * inv);
    }
  }
}

void sdpa(const OpCall& c, Tensor& out) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const Tensor mask = c.inputs.size() > 3 ? c.inputs[3] : Tensor();
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Sk = k.size(2), Dv = v.size(3);
  check(D <= kMaxHeadDim && Dv <= kMaxHeadDim, "sdpa", "cuda: head dims ", D, " and ", Dv,
        " must be at most ", kMaxHeadDim);
  check(is_kernel_float(out.dtype()), "sdpa", "cuda: output ", out.str(), " is not supported yet");
  if (out.numel() == 0) return;
  const float scale = float(c.attrs.f0 > 0 ? c.attrs.f0 : 1.0 / std::sqrt(double(D)));
  const Operand4 qo = operand(q, false), ko = operand(k, false), vo = operand(v, false);
  const Operand4 mo = mask.defined() ? operand(mask, true) : Operand4{};
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  const int64_t rows = B * H * Sq, blocks = (rows + kWarps - 1) / kWarps;
  sdpa_kernel<<<unsigned(blocks < 65535 ? blocks : 65535), 32 * kWarps, 0, current_stream()>>>(
      qo, ko, vo, mo, mask.defined(), out.data_ptr(), out.dtype(), B, H, Sq, Sk, int(D), int(Dv), scale);
  check_cuda(cudaGetLastError(), "sdpa: kernel launch", idx);
}

// Unmasked calls with at least this many scores go to the GEMM path when cuDNN declines them (float32):
// the simple kernel walks keys one at a time (~1 TFLOP/s), f32 GEMMs run at tens.
constexpr int64_t kGemmPathScores = int64_t(1) << 20;

// cuDNN's fused flash attention where it takes the call (cudnn_sdpa.cpp: bf16/fp16, no mask, D <= 256);
// else unmasked calls with head dims above 256, or many scores, through f32 GEMMs (sdpa_gemm.cpp); this
// kernel otherwise and whenever DIFFQ_CUDA_SDPA=simple (which still sends D > 256 to the GEMMs).
void sdpa_select(const OpCall& c, Tensor& out) {
  const bool simple = sdpa_forced_simple();
  if (!simple && cudnn_sdpa(c, out)) return;
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const bool masked = c.inputs.size() > 3 && c.inputs[3].defined();
  const bool wide = q.size(3) > kMaxHeadDim || v.size(3) > kMaxHeadDim;
  const bool large = q.size(0) * q.size(1) * q.size(2) * k.size(2) >= kGemmPathScores;
  if (wide || (!simple && !masked && large)) return sdpa_by_gemm(c, out);
  sdpa(c, out);
}

}  // namespace

void register_attention_kernels() { ops::register_kernel(OpKind::sdpa, DeviceKind::cuda, sdpa_select); }

}  // namespace diffq::backend::cuda
