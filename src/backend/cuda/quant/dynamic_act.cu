#include "backend/cuda/quant/dynamic_act.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/dynamic_act.cuh"
#include "backend/cuda/runtime.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row: its min and max (NaN ignored, as std::min / std::max leave them), then its scale
// (per row), or the row's min / max kept for the per-tensor pass.
__global__ void row_min_max_kernel(const void* x, DType xdt, int64_t K, bool per_tensor, DType cd, float* scale,
                                   float* mins, float* maxs) {
  __shared__ float smin[kThreads], smax[kThreads];
  const int64_t r = blockIdx.x;
  float a = INFINITY, b = -INFINITY;
  for (int64_t c = threadIdx.x; c < K; c += blockDim.x) {
    const float v = load_f32(x, xdt, r * K + c);
    a = blockq::std_min(a, v), b = blockq::std_max(b, v);
  }
  smin[threadIdx.x] = a, smax[threadIdx.x] = b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) {
      smin[threadIdx.x] = blockq::std_min(smin[threadIdx.x], smin[threadIdx.x + s]);
      smax[threadIdx.x] = blockq::std_max(smax[threadIdx.x], smax[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (per_tensor) {
    mins[r] = smin[0], maxs[r] = smax[0];
  } else {
    scale[r] = blockq::int8_symmetric_scale(smin[0], smax[0], cd);
  }
}

// Per tensor: the rows' minima and maxima (in row order, as the CPU combines them) to the one scale.
__global__ void tensor_scale_kernel(const float* mins, const float* maxs, int64_t M, DType cd, float* scale) {
  float a = INFINITY, b = -INFINITY;
  for (int64_t r = 0; r < M; ++r) a = blockq::std_min(a, mins[r]), b = blockq::std_max(b, maxs[r]);
  scale[0] = blockq::int8_symmetric_scale(a, b, cd);
}

__global__ void quantize_kernel(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, const float* scale,
                                int8_t* q) {
  const int64_t n_all = M * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const float recip = blockq::div(1.0f, scale[per_tensor ? 0 : i / K]);
    q[i] = blockq::int8_code(load_f32(x, xdt, i), recip);
  }
}

__global__ void epilogue_kernel(const int32_t* c, const float* x_scale, bool per_tensor, const void* w_scale,
                                DType wsdt, int64_t bn, const void* bias, DType bdt, int64_t M, int64_t N, void* y,
                                DType out) {
  const int64_t n_all = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / N, n = i - r * N;
    const float v = blockq::int8dq_output(c[i], x_scale[per_tensor ? 0 : r], blockq::load_value(w_scale, wsdt, n / bn),
                                          bias != nullptr, bias ? blockq::load_value(bias, bdt, n) : 0.0f, out);
    store_f32(y, out, i, v);
  }
}

// One block per row: the row's absmax (NaN wins), then its e4m3 scale, or the absmax kept for the tensor.
__global__ void row_amax_kernel(const void* x, DType xdt, int64_t K, bool per_tensor, DType hp, float* scale,
                                float* amax) {
  __shared__ float sm[kThreads];
  const int64_t r = blockIdx.x;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < K; c += blockDim.x) m = blockq::amax_combine(m, fabsf(load_f32(x, xdt, r * K + c)));
  sm[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) sm[threadIdx.x] = blockq::amax_combine(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (per_tensor)
    amax[r] = sm[0];
  else
    scale[r] = blockq::e4m3_scale(sm[0], hp);
}

__global__ void tensor_amax_scale_kernel(const float* amax, int64_t M, DType hp, float* scale) {
  float m = 0.0f;
  for (int64_t r = 0; r < M; ++r) m = blockq::amax_combine(m, amax[r]);
  scale[0] = blockq::e4m3_scale(m, hp);
}

__global__ void fp8_fake_quant_kernel(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, const float* scale,
                                      Float8Table f8, float* out) {
  const int64_t n_all = M * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = blockq::e4m3_fake_quant(load_f32(x, xdt, i), scale[per_tensor ? 0 : i / K], f8.v);
}

__global__ void fp8_codes_kernel(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, const float* scale,
                                 uint8_t* codes) {
  const int64_t n_all = M * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x)
    codes[i] = blockq::e4m3_code(load_f32(x, xdt, i), scale[per_tensor ? 0 : i / K]);
}

__global__ void fp8_epilogue_kernel(const float* acc, const float* x_scale, bool per_tensor, const float* w_scale,
                                    int64_t bn, const void* bias, DType bdt, int64_t M, int64_t N, void* y, DType out) {
  const int64_t n_all = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / N, n = i - r * N;
    store_f32(y, out, i,
              blockq::fp8dq_output(acc[i], x_scale[per_tensor ? 0 : r], w_scale[n / bn], bias != nullptr,
                                   bias ? blockq::load_value(bias, bdt, n) : 0.0f));
  }
}

// The activations' e4m3 scales: per row, or the tensor's (amax: M floats of scratch).
void fp8_activation_scales(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType hp, float* scale,
                           float* amax) {
  row_amax_kernel<<<unsigned(M), kThreads, 0, current_stream()>>>(x, xdt, K, per_tensor, hp, scale, amax);
  if (per_tensor) tensor_amax_scale_kernel<<<1, 1, 0, current_stream()>>>(amax, M, hp, scale);
}

}  // namespace

void fp8_quantize_activation_codes(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType hp,
                                   float* scale, float* amax, uint8_t* codes, int device) {
  if (M == 0) return;
  fp8_activation_scales(x, xdt, M, K, per_tensor, hp, scale, amax);
  fp8_codes_kernel<<<grid_for(M * K, kThreads), kThreads, 0, current_stream()>>>(x, xdt, M, K, per_tensor, scale, codes);
  check_cuda(cudaGetLastError(), "linear_q: float8 activation codes launch", device);
}

void fp8dq_epilogue(const float* acc, const float* x_scale, bool per_tensor, const float* w_scale, int64_t w_block_rows,
                    const void* bias, DType bdt, int64_t M, int64_t N, void* y, DType out, int device) {
  if (M * N == 0) return;
  fp8_epilogue_kernel<<<grid_for(M * N, kThreads), kThreads, 0, current_stream()>>>(acc, x_scale, per_tensor, w_scale,
                                                                                    w_block_rows, bias, bdt, M, N, y, out);
  check_cuda(cudaGetLastError(), "linear_q: fp8dq epilogue launch", device);
}

void fp8_fake_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType hp,
                                   const Float8Table& f8, float* scale, float* amax, float* out, int device) {
  if (M == 0) return;
  fp8_activation_scales(x, xdt, M, K, per_tensor, hp, scale, amax);
  fp8_fake_quant_kernel<<<grid_for(M * K, kThreads), kThreads, 0, current_stream()>>>(x, xdt, M, K, per_tensor, scale, f8, out);
  check_cuda(cudaGetLastError(), "linear_q: float8 activation quantization launch", device);
}

void int8_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType cd, int8_t* q,
                               float* scale, float* minmax, int device) {
  if (M == 0) return;
  row_min_max_kernel<<<unsigned(M), kThreads, 0, current_stream()>>>(x, xdt, K, per_tensor, cd, scale, minmax, per_tensor ? minmax + M : nullptr);
  if (per_tensor) tensor_scale_kernel<<<1, 1, 0, current_stream()>>>(minmax, minmax + M, M, cd, scale);
  quantize_kernel<<<grid_for(M * K, kThreads), kThreads, 0, current_stream()>>>(x, xdt, M, K, per_tensor, scale, q);
  check_cuda(cudaGetLastError(), "linear_q: int8 activation quantization launch", device);
}

void int8dq_epilogue(const int32_t* c, const float* x_scale, bool per_tensor, const void* w_scale, DType wsdt,
                     int64_t w_block_rows, const void* bias, DType bdt, int64_t M, int64_t N, void* y, DType out,
                     int device) {
  if (M * N == 0) return;
  epilogue_kernel<<<grid_for(M * N, kThreads), kThreads, 0, current_stream()>>>(c, x_scale, per_tensor, w_scale, wsdt, w_block_rows, bias,
                                                          bdt, M, N, y, out);
  check_cuda(cudaGetLastError(), "linear_q: int8dq epilogue launch", device);
}

}  // namespace diffq::backend::cuda
