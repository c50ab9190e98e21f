// Block-wide reductions for the row kernels (group_norm's statistics, integer reduce): a warp shuffle
// tree, then one value per warp through shared memory. blockDim.x must be a multiple of 32 (at most
// 1024), and every thread of the block must call (each returns the block's result to every thread).
// The leading __syncthreads lets a kernel call the same reduction twice in a row: the shared slots of
// the first call may still be being read.
#pragma once

#include <cstdint>

namespace diffq::backend::cuda {

__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += part[w];
  return s;
}

// Two's-complement wrapping sum (the CPU's uint64 accumulation).
__device__ __forceinline__ int64_t block_sum_i64(int64_t v) {
  __shared__ unsigned long long part[32];
  unsigned long long u = static_cast<unsigned long long>(v);
  for (int o = 16; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = u;
  __syncthreads();
  unsigned long long s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += part[w];
  return static_cast<int64_t>(s);
}

__device__ __forceinline__ int64_t block_max_i64(int64_t v) {
  __shared__ long long part[32];
  long long m = v;
  for (int o = 16; o > 0; o >>= 1) {
    const long long u = __shfl_xor_sync(0xffffffffu, m, o);
    m = u > m ? u : m;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  long long r = part[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) r = part[w] > r ? part[w] : r;
  return r;
}

// Max over a warp, NaN when any lane holds a NaN (every lane gets the result).
__device__ __forceinline__ float warp_max_nan(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = (isnan(v) || isnan(u)) ? NAN : fmaxf(v, u);
  }
  return v;
}

}  // namespace diffq::backend::cuda
