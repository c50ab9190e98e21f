// Registration of the CPU kernels, one function per op-family file.
#pragma once

#include "ops/op.h"

namespace diffq::backend::cpu {

using ops::Attrs;
using ops::OpCall;
using ops::OpKind;

void register_copy_kernels();         // copy.cpp: copy, cast, to_device
void register_linear_kernels();       // linear.cpp: linear, matmul
void register_elementwise_kernels();  // elementwise.cpp: binary, scalar, clamp
void register_unary_kernels();        // unary.cpp: unary
void register_softmax_kernels();      // softmax.cpp: softmax
void register_norm_kernels();         // norm.cpp: layer_norm, rms_norm, group_norm
void register_rope_kernels();         // rope.cpp: rope
void register_norm_rope_kernel();     // norm_rope.cpp: rms_norm_rope
void register_attention_kernels();    // attention.cpp: sdpa
void register_conv_kernels();         // conv.cpp: conv2d
void register_layout_kernels();       // layout.cpp: upsample_nearest2x, concat, embedding
void register_channel_norm_kernels();  // channel_norm.cpp: channel_norm
void register_mul_add_kernel();        // mul_add.cpp: mul_add
void register_reduce_kernels();       // reduce.cpp: reduce, absmax_blocks
void register_linear_q_kernels();  // quant/linear_q.cpp: per scheme, and "*"

}  // namespace diffq::backend::cpu
