// Registration of the CUDA backend: the device allocator and one function per op-family file.
#pragma once

#include "diffq/memory.h"
#include "ops/op.h"

namespace diffq::backend::cuda {

using ops::Attrs;
using ops::OpCall;
using ops::OpKind;

// The allocator of cuda:index (created on first use; throws when that device is not present).
// core/memory.cpp uses it as the default CUDA allocator factory in CUDA builds.
Allocator& device_allocator(int index);

// `t` as a library call wants an operand: of dtype `dt`, contiguous and 16-byte aligned on its device;
// `t` itself when it already is, else an eager cast and/or copy (ops::execute: never recorded by a trace).
// cuBLASLt's GEMMs and cuDNN's convolutions take their operands through it (gemm.cpp).
Tensor packed_operand(const Tensor& t, DType dt);
// C[M, N] (int32, row-major) = X[M, K] (int8) x W^T, W stored [N, K] int8: cuBLASLt's IMMA GEMM (gemm.cpp).
void gemm_s8s8_s32(int idx, const int8_t* x, const int8_t* w, int32_t* d, int64_t M, int64_t N, int64_t K);
// D[M, N] (float32, row-major) = X[M, K] (float8_e4m3fn codes) x W^T, W stored [N, K] e4m3fn codes, unit
// scales (the caller scales the result): cuBLASLt's fp8 GEMM. Returns "" when it ran, else why not
// (K or N not a multiple of 16; no fp8 algorithm on this GPU, remembered per device): the caller then
// computes it another way. The operands must be 16-byte aligned.
std::string gemm_e4m3_f32(int idx, const uint8_t* x, const uint8_t* w, float* d, int64_t M, int64_t N, int64_t K);
int64_t gemm_e4m3_runs();  // float8 GEMMs run so far (tests: the fast path was taken)

// sdpa through f32 GEMMs and a softmax in chunks of query rows (sdpa_gemm.cpp): head dims above 256 and
// large float32 calls; no mask.
void sdpa_by_gemm(const OpCall& c, Tensor& out);

void register_kernels();         // register.cpp: everything below plus the allocator
void register_copy_kernels();    // copy.cu: copy, cast, to_device
void register_binary_kernels();  // binary.cu: binary (add, sub, mul, div, maximum, minimum), mul_add
void register_elementwise_kernels();  // elementwise.cu: scalar, clamp, unary
void register_norm_kernels();    // norm.cu: softmax, layer_norm, rms_norm, rope, reduce
void register_layout_kernels();  // layout.cu: concat
void register_attention_kernels();  // attention.cu: sdpa
void register_gemm_kernels();    // gemm.cpp: linear, matmul (cuBLASLt)
void register_group_norm_kernels();    // group_norm.cu: group_norm
void register_channel_norm_kernels();  // channel_norm.cu: channel_norm
void register_upsample_kernels();      // upsample.cu: upsample_nearest2x
void register_embedding_kernels();     // embedding.cu: embedding
void register_absmax_kernels();        // absmax.cu: absmax_blocks
void register_cudnn_kernels();        // cudnn_conv.cpp: conv2d through cuDNN (none without cuDNN)
void register_linear_q_kernels();     // quant/linear_q_common.cpp: linear_q per scheme (quant/linear_q_*.cpp)

}  // namespace diffq::backend::cuda
