// group_norm on CUDA: x [N, C, spatial...] (any strided view of float32/float16/bfloat16), statistics
// per (image, group) over C/G channels x spatial, optional weight/bias [C] of any float dtype and any
// shape of C elements; output in x's dtype, rounded once. The CPU backend's formulas
// (src/backend/cpu/norm.cpp group_norm_kernel): mean and variance in double, rstd = 1/sqrt(var + eps)
// in double, then y = fma(x - mean, float(rstd * w[c]), b[c]) in f32; with attrs.flag (ops::group_norm_silu)
// silu of y rounded to the output dtype, as the two ops. The scalar reference the tests
// hold it to is the f64 reference and the CPU backend (tests/cuda/test_cuda_op_table.cpp); the chunk
// plan and the merge of chunk statistics also run on the host (tests/cuda/test_cuda_kernel_math.cpp).
//
// Three launches: per-chunk moments (one block per chunk of a group, two passes over the chunk),
// their merge per group (one thread per group), and the elementwise normalisation (grid-stride).
#include "backend/channels_last.h"
#include <cstdint>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/convert.cuh"
#include "backend/cuda/elementwise_math.cuh"
#include "backend/cuda/index_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;  // a multiple of 32

// part[(p * chunks + b)] = moments of chunk b of group p (groups: contiguous ranges of `elems`).
__global__ void chunk_moments_kernel(KernelInput x, int64_t groups, int64_t elems, int64_t chunk,
                                     int64_t chunks, Moments* part) {
  for (int64_t p = blockIdx.y; p < groups; p += gridDim.y)
    for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
      const int64_t begin = p * elems + b * chunk;
      const int64_t len = b * chunk + chunk <= elems ? chunk : elems - b * chunk;
      double s = 0;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += x.f32_at(begin + j);
      const double mean = block_sum_f64(s) / double(len);
      double q = 0;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const double d = double(x.f32_at(begin + j)) - mean;
        q += d * d;
      }
      q = block_sum_f64(q);
      if (threadIdx.x == 0) part[p * chunks + b] = Moments{double(len), mean, q};
    }
}

// stats[2p] = mean, stats[2p + 1] = 1 / sqrt(var + eps) of group p.
__global__ void merge_moments_kernel(const Moments* part, int64_t groups, int64_t chunks, double eps,
                                     double* stats) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < groups;
       p += int64_t(gridDim.x) * blockDim.x) {
    Moments m;
    for (int64_t b = 0; b < chunks; ++b) m = combine_moments(m, part[p * chunks + b]);
    stats[2 * p] = m.mean;
    stats[2 * p + 1] = 1.0 / sqrt(m.m2 / m.count + eps);
  }
}

__global__ void group_norm_apply_kernel(KernelInput x, KernelInput w, KernelInput b, const double* stats,
                                        void* out, DType ot, int64_t C, int64_t spatial, int64_t cg,
                                        int64_t n, bool silu) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t nc = i / spatial, c = nc % C;
    const int64_t p = (nc / C) * (C / cg) + c / cg;  // image * G + group
    const double rstd = stats[2 * p + 1];
    const float scale = float(w.data ? rstd * double(w.f32_at(c)) : rstd);
    const float shift = b.data ? b.f32_at(c) : 0.0f;
    const float y = group_norm_value(x.f32_at(i), float(stats[2 * p]), scale, shift);
    if (!silu) {
      store_f32(out, ot, i, y);
      continue;
    }
    // silu(group_norm(x)): the norm rounded to the output dtype first, as the two ops (norm.cpp).
    store_f32(out, ot, i, apply_unary(ops::UnaryFn::silu, round_f32(ot, y)));
  }
}

void group_norm(const OpCall& c, Tensor& out) {
  // channels-last: by way of channels-first copies (backend/channels_last.h)
  if (is_channels_last(c)) return run_channels_first(c, out, group_norm);
  const Tensor& x = c.inputs[0];
  check(is_kernel_float(out.dtype()), "group_norm", "cuda: output ", out.str(), " is not supported");
  const int64_t N = x.size(0), C = x.size(1), G = c.attrs.i0;
  check(G > 0 && C % G == 0, "group_norm", "cuda: ", C, " channels are not divisible into ", G, " groups");
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t spatial = n / (N * C), cg = C / G, groups = N * G, elems = cg * spatial;
  const KernelInput xi = float_input(x, x.shape(), "group_norm");
  const KernelInput wi = flat_float_input(optional_input(c, 1), "group_norm");
  const KernelInput bi = flat_float_input(optional_input(c, 2), "group_norm");
  const GroupChunks plan = plan_group_chunks(elems, groups);
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  // Scratch in 8-byte elements: the chunk moments (3 doubles each), then mean/rstd per group.
  static_assert(sizeof(Moments) == 3 * sizeof(double));
  Tensor scratch = Tensor::empty({groups * plan.chunks * 3 + groups * 2}, DType::i64, out.device());
  auto* part = static_cast<Moments*>(scratch.data_ptr());
  auto* stats = reinterpret_cast<double*>(part + groups * plan.chunks);
  const dim3 grid(unsigned(plan.chunks), unsigned(groups < 65535 ? groups : 65535));
  chunk_moments_kernel<<<grid, kThreads, 0, current_stream()>>>(xi, groups, elems, plan.chunk, plan.chunks, part);
  check_cuda(cudaGetLastError(), "group_norm: chunk statistics kernel launch", idx);
  merge_moments_kernel<<<grid_for(groups, kThreads), kThreads, 0, current_stream()>>>(part, groups, plan.chunks, c.attrs.f0, stats);
  check_cuda(cudaGetLastError(), "group_norm: merge kernel launch", idx);
  group_norm_apply_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(xi, wi, bi, stats, out.data_ptr(), out.dtype(),
                                                               C, spatial, cg, n, c.attrs.flag);
  check_cuda(cudaGetLastError(), "group_norm: kernel launch", idx);
}

}  // namespace

void register_group_norm_kernels() { ops::register_kernel(OpKind::group_norm, DeviceKind::cuda, group_norm); }

}  // namespace diffq::backend::cuda
