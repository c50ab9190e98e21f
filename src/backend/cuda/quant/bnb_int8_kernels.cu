#include "backend/cuda/quant/bnb_int8_kernels.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/bnb_int8_values.cuh"
#include "backend/cuda/runtime.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

// Every element: does its column hold an outlier? (All writers store 1: no ordering needed.)
__global__ void outlier_flags_kernel(const void* x, DType xdt, int64_t M, int64_t K, float thr16, uint8_t* flags) {
  const int64_t n_all = M * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x)
    if (blockq::bnb8_is_outlier(blockq::bnb8_half(load_f32(x, xdt, i)), thr16)) flags[i % K] = 1;
}

// The flagged columns in ascending order (one thread: K reads, the order the CPU adds them in).
__global__ void list_columns_kernel(const uint8_t* flags, int64_t K, int32_t* cols, int32_t* n_cols) {
  int32_t n = 0;
  for (int64_t c = 0; c < K; ++c)
    if (flags[c]) cols[n++] = int32_t(c);
  *n_cols = n;
}

// One block per row: the row's absmax without its outliers (partial folds from 0 never hold a NaN, so the
// tree's order gives the sequential fold's maximum), then the row's codes.
__global__ void row_quantize_kernel(const void* x, DType xdt, int64_t M, int64_t K, int64_t Kp, bool sparse,
                                    float thr16, const uint8_t* flags, int8_t* q, float* absmax) {
  __shared__ float sm[kThreads];
  const int64_t r = blockIdx.x;
  float am = 0.0f;
  for (int64_t c = threadIdx.x; c < K; c += blockDim.x) {
    const float a = blockq::bnb8_half(load_f32(x, xdt, r * K + c));
    am = blockq::bnb8_max(am, blockq::bnb8_abs(a, sparse && blockq::bnb8_is_outlier(a, thr16)));
  }
  sm[threadIdx.x] = am;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) sm[threadIdx.x] = blockq::bnb8_max(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  const float rowmax = sm[0], mult = blockq::bnb8_mult(rowmax);
  if (threadIdx.x == 0) absmax[r] = rowmax;
  for (int64_t c = threadIdx.x; c < Kp; c += blockDim.x) {
    int8_t code = 0;
    if (c < K && !(sparse && M > 1 && flags[c])) {
      const float a = blockq::bnb8_half(load_f32(x, xdt, r * K + c));
      code = blockq::bnb8_code(a, sparse && blockq::bnb8_is_outlier(a, thr16), mult);
    }
    q[r * Kp + c] = code;
  }
}

__global__ void pad_kernel(const int8_t* w, int64_t N, int64_t K, int64_t Kp, int8_t* out) {
  const int64_t n_all = N * Kp;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / Kp, c = i - n * Kp;
    out[i] = c < K ? w[n * K + c] : int8_t(0);
  }
}

__global__ void epilogue_kernel(const int32_t* acc, const float* absmax, const int8_t* wq, const float* scb,
                                const void* bias, DType bdt, const void* x, const int32_t* cols,
                                const int32_t* n_cols, int64_t M, int64_t N, int64_t K, void* y, DType ydt) {
  const int64_t n_all = M * N;
  const int32_t nc = *n_cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i - m * N;
    const float sc = scb[n];
    float v = blockq::bnb8_main(acc[i], absmax[m], sc, bias != nullptr, bias ? load_f32(bias, bdt, n) : 0.0f, ydt);
    if (nc > 0) {
      float s = 0.0f;
      for (int32_t j = 0; j < nc; ++j) {
        const int64_t col = cols[j];
        s = blockq::bnb8_outlier_term(s, load_f32(x, ydt, m * K + col),
                                      blockq::bnb8_outlier_weight(wq[n * K + col], sc, ydt));
      }
      v = blockq::bnb8_with_outliers(v, s, ydt);
    }
    store_f32(y, ydt, i, v);
  }
}

}  // namespace

void bnb8_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, int64_t Kp, bool sparse, float thr16,
                               int8_t* q, float* absmax, uint8_t* col_flags, int32_t* cols, int32_t* n_cols,
                               int device) {
  if (M == 0) return;
  if (sparse && K > 0) {
    check_cuda(cudaMemsetAsync(col_flags, 0, size_t(K), current_stream()), "linear_q: bnb_int8 outlier flags memset", device);
    outlier_flags_kernel<<<grid_for(M * K, kThreads), kThreads, 0, current_stream()>>>(x, xdt, M, K, thr16, col_flags);
    list_columns_kernel<<<1, 1, 0, current_stream()>>>(col_flags, K, cols, n_cols);
  } else {
    check_cuda(cudaMemsetAsync(n_cols, 0, sizeof(int32_t), current_stream()), "linear_q: bnb_int8 outlier count memset", device);
  }
  row_quantize_kernel<<<unsigned(M), kThreads, 0, current_stream()>>>(x, xdt, M, K, Kp, sparse, thr16, col_flags, q, absmax);
  check_cuda(cudaGetLastError(), "linear_q: bnb_int8 activation quantization launch", device);
}

void bnb8_pad_codes(const int8_t* w, int64_t N, int64_t K, int64_t Kp, int8_t* out, int device) {
  if (N * Kp == 0) return;
  pad_kernel<<<grid_for(N * Kp, kThreads), kThreads, 0, current_stream()>>>(w, N, K, Kp, out);
  check_cuda(cudaGetLastError(), "linear_q: bnb_int8 weight padding launch", device);
}

void bnb8_epilogue(const int32_t* acc, const float* absmax, const int8_t* wq, const float* scb, const void* bias,
                   DType bdt, const void* x, const int32_t* cols, const int32_t* n_cols, int64_t M, int64_t N,
                   int64_t K, void* y, DType ydt, int device) {
  if (M * N == 0) return;
  epilogue_kernel<<<grid_for(M * N, kThreads), kThreads, 0, current_stream()>>>(acc, absmax, wq, scb, bias, bdt, x,
                                                                               cols, n_cols, M, N, K, y, ydt);
  check_cuda(cudaGetLastError(), "linear_q: bnb_int8 epilogue launch", device);
}

}  // namespace diffq::backend::cuda
