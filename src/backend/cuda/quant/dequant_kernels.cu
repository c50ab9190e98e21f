#include "backend/cuda/quant/dequant_kernels.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/bnb_int8_values.cuh"
#include "backend/cuda/quant/nunchaku_values.cuh"
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

// W [N, K]: element (n, k) is decode(n, k) (one thread per element), rounded through rdt, stored as odt.
template <class Decode>
__global__ void decode_kernel(Decode decode, int64_t N, int64_t K, DType rdt, void* out, DType odt) {
  const int64_t n_all = N * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K;
    store_f32(out, odt, i, round_via(rdt, decode(n, i - n * K)));
  }
}

template <class Decode>
void launch_decode(const Decode& decode, int64_t N, int64_t K, DType rdt, void* out, DType odt, int device,
                   const char* what) {
  const int64_t n = N * K;
  if (n == 0) return;
  decode_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(decode, N, K, rdt, out, odt);
  check_cuda(cudaGetLastError(), what, device);
}

struct GgufDecode {
  const uint8_t* data;
  uint32_t type;
  int64_t row_bytes, bs, ts;
  __device__ float operator()(int64_t n, int64_t k) const {
    return blockq::gguf_value(type, data + n * row_bytes + (k / bs) * ts, int(k % bs));
  }
};

struct TorchaoInt4Decode {
  const uint8_t* q;
  const void *scale, *zero;
  DType sdt;
  int64_t N, K, g;
  __device__ float operator()(int64_t n, int64_t k) const {
    return blockq::torchao_int4_value(q, scale, zero, sdt, N, K, g, n, k);
  }
};

struct QuantoDecode {
  blockq::QuantoParams p;
  const uint8_t* data;
  const void *scale, *shift;
  Float8Table f8;
  __device__ float operator()(int64_t n, int64_t k) const { return blockq::quanto_value(p, data, scale, shift, f8.v, n, k); }
};

struct SdnqDecode {
  blockq::SdnqParams p;
  const uint8_t* w;
  const void *scale, *zero;
  Float8Table f8;
  __device__ float operator()(int64_t n, int64_t k) const { return blockq::sdnq_value(p, w, scale, zero, f8.v, n, k); }
};

struct AutoRoundDecode {
  blockq::AutoRoundParams p;
  const uint32_t *qweight, *qzeros;
  const void *scales, *g_idx;
  DType compute;
  __device__ float operator()(int64_t n, int64_t k) const {
    return blockq::autoround_value(p, qweight, qzeros, scales, g_idx, compute, n, k);
  }
};

struct ScaledDecode {
  blockq::ScaledParams p;
  const uint8_t* q;
  const void* scale;
  Float8Table f8;
  __device__ float operator()(int64_t n, int64_t k) const { return blockq::scaled_value(p, q, scale, f8.v, n, k); }
};

struct Bnb8FpDecode {
  const int8_t* q;
  const float* scb;
  int64_t K;
  DType dt;
  __device__ float operator()(int64_t n, int64_t k) const { return blockq::bnb8_fp_weight(q[n * K + k], scb[n], dt); }
};

struct NunchakuAwqDecode {
  const int32_t* qweight;
  const float *wscales, *wzeros;
  int64_t N, K;
  __device__ float operator()(int64_t n, int64_t k) const {
    return blockq::awq_value(qweight, wscales, wzeros, N, K, n, k);
  }
};

__global__ void bnb4_kernel(blockq::Bnb4Params p, const uint8_t* packed, const void* absmax, const float* nested_absmax,
                            const float* nested_map, int64_t n, void* out, DType odt) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out, odt, i, blockq::bnb4_value(p, packed, absmax, nested_absmax, nested_map, i));
}

}  // namespace

void dequant_bnb8_fp(const int8_t* q, const float* scb, int64_t N, int64_t K, DType round_dtype, void* out,
                     DType out_dtype, int device) {
  launch_decode(Bnb8FpDecode{q, scb, K, round_dtype}, N, K, round_dtype, out, out_dtype, device,
                "linear_q: dequant_bnb8_fp launch");
}

void dequant_nunchaku_awq(const int32_t* qweight, const float* wscales, const float* wzeros, int64_t N, int64_t K,
                          DType round_dtype, void* out, DType out_dtype, int device) {
  launch_decode(NunchakuAwqDecode{qweight, wscales, wzeros, N, K}, N, K, round_dtype, out, out_dtype, device,
                "linear_q: dequant_nunchaku_awq launch");
}

void dequant_scaled(const blockq::ScaledParams& p, const uint8_t* q, const void* scale, const Float8Table& f8,
                    int64_t N, DType round_dtype, void* out, DType out_dtype, int device) {
  launch_decode(ScaledDecode{p, q, scale, f8}, N, p.K, round_dtype, out, out_dtype, device,
                "linear_q: dequant_scaled launch");
}

void dequant_sdnq(const blockq::SdnqParams& p, const uint8_t* w, const void* scale, const void* zero,
                  const Float8Table& f8, int64_t N, DType round_dtype, void* out, DType out_dtype, int device) {
  launch_decode(SdnqDecode{p, w, scale, zero, f8}, N, p.in_features, round_dtype, out, out_dtype, device,
                "linear_q: dequant_sdnq launch");
}

void dequant_autoround(const blockq::AutoRoundParams& p, const uint32_t* qweight, const uint32_t* qzeros,
                       const void* scales, const void* g_idx, DType compute, void* out, DType out_dtype, int device) {
  // autoround_value already rounds to `compute` (x's dtype): no second rounding.
  launch_decode(AutoRoundDecode{p, qweight, qzeros, scales, g_idx, compute}, p.N, p.K, DType::f32, out, out_dtype,
                device, "linear_q: dequant_autoround launch");
}

void dequant_torchao_int4(const uint8_t* q, const void* scale, const void* zero, DType scale_dtype, int64_t N,
                          int64_t K, int64_t group, void* out, DType out_dtype, int device) {
  launch_decode(TorchaoInt4Decode{q, scale, zero, scale_dtype, N, K, group}, N, K, DType::f32, out, out_dtype, device,
                "linear_q: dequant_torchao_int4 launch");
}

void dequant_quanto(const blockq::QuantoParams& p, const uint8_t* data, const void* scale, const void* shift,
                    const Float8Table& f8, int64_t N, DType round_dtype, void* out, DType out_dtype, int device) {
  launch_decode(QuantoDecode{p, data, scale, shift, f8}, N, p.in_features, round_dtype, out, out_dtype, device,
                "linear_q: dequant_quanto launch");
}

void dequant_gguf(const uint8_t* data, uint32_t type, int64_t N, int64_t K, int64_t row_bytes, int64_t block_size,
                  int64_t type_size, DType round_dtype, void* out, DType out_dtype, int device) {
  launch_decode(GgufDecode{data, type, row_bytes, block_size, type_size}, N, K, round_dtype, out, out_dtype, device,
                "linear_q: dequant_gguf launch");
}

void dequant_bnb4(const blockq::Bnb4Params& p, const uint8_t* packed, const void* absmax, const float* nested_absmax,
                  const float* nested_map, int64_t n, void* out, DType out_dtype, int device) {
  if (n == 0) return;
  bnb4_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(p, packed, absmax, nested_absmax, nested_map, n, out, out_dtype);
  check_cuda(cudaGetLastError(), "linear_q: dequant_bnb4 launch", device);
}

void dequant_float8(const uint8_t* q, const Float8Table& table, const float* scale, int64_t N, int64_t K,
                    int64_t bn, int64_t bk, DType round_dtype, void* out, DType out_dtype, int device) {
  const int64_t n = N * K;
  if (n == 0) return;
  float8_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(q, table, scale, N, K, bn, bk, round_dtype, out, out_dtype);
  check_cuda(cudaGetLastError(), "linear_q: dequant_float8 launch", device);
}

void dequant_affine_int8(const int8_t* q, const void* scale, DType scale_dtype, const int8_t* zp, int64_t N,
                         int64_t K, int64_t bn, int64_t bk, void* out, DType out_dtype, int device) {
  const int64_t n = N * K;
  if (n == 0) return;
  affine_int8_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(q, scale, scale_dtype, zp, N, K, bn, bk, out, out_dtype);
  check_cuda(cudaGetLastError(), "linear_q: dequant_affine_int8 launch", device);
}

}  // namespace diffq::backend::cuda
