#include "backend/cuda/quant/dequant_kernels.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

// v rounded to dtype t and widened back (torchao's tensor ops in t).
__device__ __forceinline__ float round_via(DType t, float v) {
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
}

// torch's type promotion of two float dtypes (affine.h promote_float).
__device__ __forceinline__ DType promote(DType a, DType b) {
  if (a == b) return a;
  return DType::f32;
}

__global__ void affine_int8_kernel(const int8_t* q, const void* scale, DType sdt, const int8_t* zp, int64_t N, int64_t K,
                                   int64_t bn, int64_t bk, void* out, DType odt) {
  const int64_t n_all = N * K, kb = K / bk;
  const DType pd = promote(odt, sdt);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K, k = i - n * K, b = (n / bn) * kb + k / bk;
    const float d = round_via(odt, float(int32_t(q[i]) - int32_t(zp[b])));
    store_f32(out, odt, i, round_via(odt, round_via(pd, __fmul_rn(d, load_f32(scale, sdt, b)))));
  }
}

__global__ void float8_kernel(const uint8_t* q, Float8Table table, const float* scale, int64_t N, int64_t K, int64_t bn,
                              int64_t bk, DType rdt, void* out, DType odt) {
  const int64_t n_all = N * K, kb = K / bk;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K, k = i - n * K;
    store_f32(out, odt, i, round_via(rdt, __fmul_rn(table.v[q[i]], scale[(n / bn) * kb + k / bk])));
  }
}

}  // namespace

void dequant_float8(const uint8_t* q, const Float8Table& table, const float* scale, int64_t N, int64_t K,
                    int64_t bn, int64_t bk, DType round_dtype, void* out, DType out_dtype, int device) {
  const int64_t n = N * K;
  if (n == 0) return;
  float8_kernel<<<grid_for(n, kThreads), kThreads>>>(q, table, scale, N, K, bn, bk, round_dtype, out, out_dtype);
  check_cuda(cudaGetLastError(), "linear_q: dequant_float8 launch", device);
}

void dequant_affine_int8(const int8_t* q, const void* scale, DType scale_dtype, const int8_t* zp, int64_t N,
                         int64_t K, int64_t bn, int64_t bk, void* out, DType out_dtype, int device) {
  const int64_t n = N * K;
  if (n == 0) return;
  affine_int8_kernel<<<grid_for(n, kThreads), kThreads>>>(q, scale, scale_dtype, zp, N, K, bn, bk, out, out_dtype);
  check_cuda(cudaGetLastError(), "linear_q: dequant_affine_int8 launch", device);
}

}  // namespace diffq::backend::cuda
