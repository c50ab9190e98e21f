#include "backend/cuda/quant/nunchaku_kernels.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/nunchaku_values.cuh"
#include "backend/cuda/runtime.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;                             // outputs per tile side
constexpr int kWords = int(blockq::kSvdqGroup) / 4;  // int32 words of one group's 64 codes

// One thread per (token, group).
__global__ void quantize_kernel(const void* x, DType xdt, const float* smooth, int64_t M, int64_t K, int8_t* q,
                                float* ascale) {
  const int64_t G = K / blockq::kSvdqGroup, n_all = M * G;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / G, g = i - t * G;
    blockq::svdq_quantize_group(x, xdt, smooth, K, t, g, q + t * K + g * blockq::kSvdqGroup, ascale + i);
  }
}

// A 32 x 32 tile of outputs per block of 256 threads, 4 outputs a thread (token ty, outputs tx + 8j); per
// group the tile's 32 token rows and 32 weight rows of 64 codes are staged in shared memory (rows padded
// to 17 words: no bank conflicts on the weight side).
__global__ void __launch_bounds__(kThreads) tiled_gemm_kernel(const int8_t* q, const float* ascale,
                                                              const int8_t* codes, const float* wscales, int64_t M,
                                                              int64_t N, int64_t K, float* out) {
  __shared__ int32_t sq[kTile][kWords + 1], sw[kTile][kWords + 1];
  const int64_t G = K / blockq::kSvdqGroup, m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  const int tid = int(threadIdx.x), ty = tid / 8, tx = tid % 8;
  const int64_t t = m0 + ty;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t g = 0; g < G; ++g) {
    __syncthreads();
    for (int idx = tid; idx < kTile * kWords; idx += kThreads) {
      const int row = idx / kWords, w = idx % kWords;
      const int64_t off = g * blockq::kSvdqGroup + w * 4;
      sq[row][w] = m0 + row < M ? *reinterpret_cast<const int32_t*>(q + (m0 + row) * K + off) : 0;
      sw[row][w] = n0 + row < N ? *reinterpret_cast<const int32_t*>(codes + (n0 + row) * K + off) : 0;
    }
    __syncthreads();
    if (t >= M) continue;
    const float at = ascale[t * G + g];
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx + 8 * j;
      if (n >= N) continue;
      int32_t d = 0;
      for (int w = 0; w < kWords; ++w) d = __dp4a(sq[ty][w], sw[tx + 8 * j][w], d);
      acc[j] = blockq::svdq_group_term(acc[j], d, at, wscales[g * N + n]);
    }
  }
  if (t >= M) return;
  for (int j = 0; j < 4; ++j) {
    const int64_t n = n0 + tx + 8 * j;
    if (n < N) out[t * N + n] = acc[j];
  }
}

__global__ void reference_gemm_kernel(const int8_t* q, const float* ascale, const int8_t* codes,
                                      const float* wscales, int64_t M, int64_t N, int64_t K, float* out) {
  const int64_t G = K / blockq::kSvdqGroup, n_all = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, n = i - t * N;
    float acc = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      int32_t d = 0;
      for (int64_t k = g * blockq::kSvdqGroup; k < (g + 1) * blockq::kSvdqGroup; ++k)
        d += int32_t(q[t * K + k]) * int32_t(codes[n * K + k]);
      acc = blockq::svdq_group_term(acc, d, ascale[t * G + g], wscales[g * N + n]);
    }
    out[i] = acc;
  }
}

__global__ void lowrank_down_kernel(const void* x, DType xdt, const float* down, int64_t M, int64_t K, int64_t R,
                                    float* la) {
  const int64_t n_all = M * R;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / R, r = i - t * R;
    float s = 0.0f;
    for (int64_t k = 0; k < K; ++k) s = blockq::svdq_dot_term(s, load_f32(x, xdt, t * K + k), down[r * K + k]);
    la[i] = s;
  }
}

__global__ void epilogue_kernel(const float* main, const float* la, const float* up, const void* bias, DType bdt,
                                bool packed, int64_t M, int64_t N, int64_t R, void* y, DType ydt) {
  const int64_t n_all = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, n = i - t * N;
    float lr = 0.0f;
    for (int64_t r = 0; r < R; ++r) lr = blockq::svdq_dot_term(lr, la[t * R + r], up[n * R + r]);
    const float b = bias ? load_f32(bias, bdt, blockq::svdq_vector_index(n, packed)) : 0.0f;
    store_f32(y, ydt, i, blockq::svdq_output(main[i], lr, b));
  }
}

}  // namespace

void svdq_quantize_activations(const void* x, DType xdt, const float* smooth, int64_t M, int64_t K, int8_t* q,
                               float* ascale, int device) {
  const int64_t n = M * (K / blockq::kSvdqGroup);
  if (n == 0) return;
  quantize_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(x, xdt, smooth, M, K, q, ascale);
  check_cuda(cudaGetLastError(), "linear_q: nunchaku_svdq activation quantization launch", device);
}

void svdq_int4_gemm(const int8_t* q, const float* ascale, const int8_t* codes, const float* wscales, int64_t M,
                    int64_t N, int64_t K, float* out, int device) {
  if (M * N == 0) return;
  // Off a 4-byte boundary (no int32 loads), or more token tiles than a grid's y dimension holds: the reference.
  if (reinterpret_cast<uintptr_t>(q) % 4 != 0 || reinterpret_cast<uintptr_t>(codes) % 4 != 0 ||
      (M + kTile - 1) / kTile > 65535)
    return svdq_int4_gemm_reference(q, ascale, codes, wscales, M, N, K, out, device);
  const dim3 grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
  tiled_gemm_kernel<<<grid, kThreads, 0, current_stream()>>>(q, ascale, codes, wscales, M, N, K, out);
  check_cuda(cudaGetLastError(), "linear_q: nunchaku_svdq int4 GEMM launch", device);
}

void svdq_int4_gemm_reference(const int8_t* q, const float* ascale, const int8_t* codes, const float* wscales,
                              int64_t M, int64_t N, int64_t K, float* out, int device) {
  if (M * N == 0) return;
  reference_gemm_kernel<<<grid_for(M * N, kThreads), kThreads, 0, current_stream()>>>(q, ascale, codes, wscales, M, N,
                                                                                    K, out);
  check_cuda(cudaGetLastError(), "linear_q: nunchaku_svdq reference int4 GEMM launch", device);
}

void svdq_lowrank_down(const void* x, DType xdt, const float* down, int64_t M, int64_t K, int64_t R, float* la,
                       int device) {
  if (M * R == 0) return;
  lowrank_down_kernel<<<grid_for(M * R, kThreads), kThreads, 0, current_stream()>>>(x, xdt, down, M, K, R, la);
  check_cuda(cudaGetLastError(), "linear_q: nunchaku_svdq low-rank launch", device);
}

void svdq_epilogue(const float* main, const float* la, const float* up, const void* bias, DType bdt, bool packed,
                   int64_t M, int64_t N, int64_t R, void* y, DType ydt, int device) {
  if (M * N == 0) return;
  epilogue_kernel<<<grid_for(M * N, kThreads), kThreads, 0, current_stream()>>>(main, la, up, bias, bdt, packed, M, N,
                                                                               R, y, ydt);
  check_cuda(cudaGetLastError(), "linear_q: nunchaku_svdq epilogue launch", device);
}

}  // namespace diffq::backend::cuda
