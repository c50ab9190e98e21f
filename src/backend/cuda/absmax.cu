// absmax_blocks on CUDA: x [..., K] (any strided view of float32/float16/bfloat16) -> float32
// [..., K / block], max |x| over each run of `block` elements of the last dim; NaN when the block holds
// a NaN, as the CPU's MaxRow (src/backend/cpu/reduce.cpp). |x| of a float16/bfloat16 value is exact in
// f32, so the result equals the CPU's bit for bit (the op table checks it exactly).
// One warp per output element: the lanes stride over the block (coalesced for the usual 32..128
// element blocks of activation quantisation) and meet in a shuffle tree.
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;  // 8 warps per block

// Output element o covers x's row-major elements [o * block, (o + 1) * block): the blocks tile each row
// of K exactly, so the row never needs to be split out.
__global__ void absmax_kernel(KernelInput x, int64_t block, float* out, int64_t nout) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t o = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); o < nout; o += warps) {
    float m = -INFINITY;
    for (int64_t j = lane; j < block; j += 32) {
      const float v = fabsf(x.f32_at(o * block + j));
      m = (isnan(m) || isnan(v)) ? NAN : fmaxf(m, v);
    }
    m = warp_max_nan(m);
    if (lane == 0) out[o] = m;
  }
}

void absmax_blocks(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t block = c.attrs.i0;
  check(x.dim() >= 1 && block > 0 && x.size(-1) % block == 0, "absmax_blocks", "cuda: last dim of ", x.str(),
        " is not a multiple of block ", block);
  check(out.dtype() == DType::f32, "absmax_blocks", "cuda: output must be float32, got ", out.str());
  const int64_t nout = out.numel();
  if (nout == 0) return;
  const KernelInput xi = float_input(x, x.shape(), "absmax_blocks");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  absmax_kernel<<<grid_for(nout, kThreads / 32), kThreads, 0, current_stream()>>>(xi, block, static_cast<float*>(out.data_ptr()), nout);
  check_cuda(cudaGetLastError(), "absmax_blocks: kernel launch", idx);
}

}  // namespace

void register_absmax_kernels() { ops::register_kernel(OpKind::absmax_blocks, DeviceKind::cuda, absmax_blocks); }

}  // namespace diffq::backend::cuda
