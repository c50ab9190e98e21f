// The index maps and small formulas of the group_norm, upsample_nearest2x, embedding and absmax_blocks
// kernels, __host__ __device__ so tests/cuda/test_cuda_kernel_math.cpp can run them on a machine
// without a GPU (the same code nvcc compiles into the kernels) and compare the result with the CPU
// backend.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/strided.cuh"  // DIFFQ_HOST_DEVICE

namespace diffq::backend::cuda {

// ---- group_norm ----
// A group's elements are a contiguous range of x's row-major order ([N, G, C/G * spatial]). Large
// groups are split into chunks, one block each: a VAE's 32 groups of 16 x 128 x 128 elements would
// otherwise keep 32 of the GPU's 132 multiprocessors busy. Each chunk's statistics are taken in two
// passes (mean, then squared deviations from it), and chunks are merged with Chan's formula, so the
// variance never comes from the cancellation-prone E[x^2] - E[x]^2.
struct Moments {
  double count = 0, mean = 0, m2 = 0;  // m2: sum of squared deviations from mean
};

DIFFQ_HOST_DEVICE Moments combine_moments(Moments a, Moments b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count, delta = b.mean - a.mean;
  return {n, a.mean + delta * (b.count / n), a.m2 + b.m2 + delta * delta * (a.count * b.count / n)};
}

struct GroupChunks {
  int64_t chunk = 1;   // elements per chunk (the last one may be shorter)
  int64_t chunks = 1;  // chunks per group
};

// Enough chunks that all groups together give about 1024 blocks, none under 2048 elements.
inline GroupChunks plan_group_chunks(int64_t group_elems, int64_t groups_total) {
  constexpr int64_t kTargetBlocks = 1024, kMinChunk = 2048;
  const int64_t want = (kTargetBlocks + groups_total - 1) / (groups_total > 0 ? groups_total : 1);
  const int64_t most = (group_elems + kMinChunk - 1) / kMinChunk;
  const int64_t per_group = want < most ? want : most;
  GroupChunks g;
  g.chunks = per_group > 1 ? per_group : 1;
  g.chunk = (group_elems + g.chunks - 1) / g.chunks;
  if (g.chunk < 1) g.chunk = 1;
  g.chunks = (group_elems + g.chunk - 1) / g.chunk;
  if (g.chunks < 1) g.chunks = 1;
  return g;
}

// The normalised element, as the CPU's ScaleShiftRow: (x - mean) * scale + shift with one fused
// multiply-add, where scale = rstd * w[c] was rounded to f32 from double.
DIFFQ_HOST_DEVICE float group_norm_value(float x, float mean, float scale, float shift) {
  return fmaf(x - mean, scale, shift);
}

// ---- upsample_nearest2x ----
struct Strides4 {
  int64_t s[4] = {};
};

// Element offset in x[N, C, H, W] (strides st) of output element i of the contiguous [N, C, 2H, 2W].
DIFFQ_HOST_DEVICE int64_t upsample_source_offset(int64_t i, int64_t C, int64_t H, int64_t W, const Strides4& st) {
  const int64_t Wo = 2 * W, Ho = 2 * H;
  const int64_t ox = i % Wo, oy = (i / Wo) % Ho, nc = i / (Wo * Ho);
  return (nc / C) * st.s[0] + (nc % C) * st.s[1] + (oy >> 1) * st.s[2] + (ox >> 1) * st.s[3];
}

// ---- embedding ----
// Output element i of [..., D] copies table[id, i % D] where id is ids' element i / D (row-major).
DIFFQ_HOST_DEVICE int64_t embedding_table_offset(int64_t id, int64_t i, int64_t D, int64_t stride0, int64_t stride1) {
  return id * stride0 + (i % D) * stride1;
}

}  // namespace diffq::backend::cuda
