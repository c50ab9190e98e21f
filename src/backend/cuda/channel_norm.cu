// channel_norm on CUDA: y = x / max(||x[n, :, p]||_2, eps) * scale * w[c] for x [N, C, spatial...]
// (Wan's RMS_norm: F.normalize over the channels, scaled), any strided view of float32/float16/
// bfloat16, optional w of C elements (any float dtype, any shape). One thread per pixel (n, p) walks
// the C channels twice: adjacent threads read adjacent pixels, so contiguous inputs are read coalesced.
// The CPU backend's formulas (src/backend/cpu/channel_norm.cpp), the reference the op-table tests hold
// this to: inv = 1 / max(sqrt(sum x^2), eps) in f32 (the sum here is accumulated in double, closer to
// the f64 reference than the CPU's f32 lanes), then for a bfloat16 output each step rounded to bf16 as
// Diffusers' F.normalize(x.float()).to(bf16) * scale * gamma is: bf16(bf16(bf16(x * inv) * scale) * w);
// other outputs x * inv * (scale * w), rounded once.
#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/elementwise_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void channel_norm_kernel(KernelInput x, KernelInput w, void* out, DType ot, int64_t C, int64_t P,
                                    int64_t pixels, float eps, float scale, bool silu) {
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < pixels;
       q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (q / P) * C * P + q % P;  // element (n, 0, p); channel c adds c * P
    double acc = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double v = x.f32_at(base + c * P);
      acc += v * v;
    }
    const float inv = 1.0f / fmaxf(sqrtf(float(acc)), eps);
    for (int64_t c = 0; c < C; ++c) {
      const float wc = w.data ? w.f32_at(c) : 1.0f;
      const float xv = x.f32_at(base + c * P);
      const float y = ot == DType::bf16
                          ? __fmul_rn(round_f32(ot, __fmul_rn(round_f32(ot, __fmul_rn(xv, inv)), scale)), wc)
                          : __fmul_rn(__fmul_rn(xv, inv), __fmul_rn(scale, wc));
      // channel_norm_silu: silu of y rounded to the output dtype, as the two ops.
      store_f32(out, ot, base + c * P, silu ? apply_unary(ops::UnaryFn::silu, round_f32(ot, y)) : y);
    }
  }
}

void channel_norm(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  check(is_kernel_float(out.dtype()), "channel_norm", "cuda: output ", out.str(), " is not supported");
  check(x.dim() >= 2, "channel_norm", "cuda: expected x [N, C, ...], got ", x.str());
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t N = x.size(0), C = x.size(1), P = n / (N * C), pixels = N * P;
  const KernelInput xi = float_input(x, x.shape(), "channel_norm");
  const KernelInput wi = flat_float_input(optional_input(c, 1), "channel_norm");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  channel_norm_kernel<<<grid_for(pixels, kThreads), kThreads, 0, current_stream()>>>(xi, wi, out.data_ptr(), out.dtype(), C, P, pixels,
                                                                float(c.attrs.f0), float(c.attrs.f1), c.attrs.flag);
  check_cuda(cudaGetLastError(), "channel_norm: kernel launch", idx);
}

}  // namespace

void register_channel_norm_kernels() {
  ops::register_kernel(OpKind::channel_norm, DeviceKind::cuda, channel_norm);
}

}  // namespace diffq::backend::cuda
