// The op vocabulary and the single dispatch point. Model code calls the functions of ops/ops.h; each
// builds an OpCall and hands it to dispatch(), which either runs the registered kernel for the inputs'
// device (eager) or, while a Trace is active, records the call into a graph and returns a symbolic
// tensor of the inferred shape. Every op has exactly one output.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::ops {

enum class OpKind : uint16_t {
  copy,        // contiguous copy of any view, same dtype
  cast,        // attrs.dtype
  to_device,   // attrs.device
  linear,      // x[..., K], w[N, K], b[N]? -> [..., N]
  matmul,      // a[..., M, K] @ b[..., K, N], batch dims broadcast
  binary,      // attrs.i0 = BinaryFn; numpy broadcasting; output dtype = a's dtype
  scalar,      // attrs.i0 = ScalarFn, attrs.f0 = scalar
  clamp,       // attrs.f0 = lo, attrs.f1 = hi
  unary,       // attrs.i0 = UnaryFn
  softmax,     // attrs.i0 = dim
  layer_norm,  // x, w?, b?; attrs.f0 = eps; normalises the last dim
  rms_norm,    // x, w?; attrs.f0 = eps; last dim
  group_norm,  // x[N, C, ...], w?, b?; attrs.i0 = groups, attrs.f0 = eps; attrs.flag: silu of the result
               // (rounded to x's dtype first, as the two ops); attrs.i1 = ImageLayout (channels-last: x[N, ..., C])
  rope,        // x[B, S, H, D], cos[S, D], sin[S, D]: interleaved pairs
  sdpa,        // q[B, H, Sq, D], k[B, H, Sk, D], v[B, H, Sk, Dv], mask?; attrs.f0 = scale
  conv2d,      // x[N, C, H, W], w[O, C, kh, kw], b?, r?; attrs.ints = {stride, pad_left, pad_right, pad_top, pad_bottom};
               // r (x's dtype, the output's shape): r + conv, the conv rounded to x's dtype first (ops::conv2d_add);
               // attrs.i1 = ImageLayout (channels-last: x[N, H, W, C] -> [N, Ho, Wo, O], w still [O, C, kh, kw])
  upsample_nearest2x,  // x[N, C, H, W] -> [N, C, 2H, 2W]; attrs.i1 = ImageLayout ([N, H, W, C] -> [N, 2H, 2W, C])
  concat,      // inputs..., attrs.i0 = dim
  embedding,   // ids (integer) [...], table [V, D] -> [..., D]
  reduce,      // attrs.i0 = ReduceFn, attrs.ints = dims, attrs.flag = keepdim
  absmax_blocks,  // x[..., K]: absmax per block of attrs.i0 along the last dim -> [..., K/block] (f32)
  channel_norm,   // x[N, C, ...], w[C]?; attrs.f0 = eps, attrs.f1 = scale: x / max(||x[n, :, ...]||_2, eps) * scale * w;
                  // attrs.flag: silu of the result (rounded to x's dtype first, as the two ops)
  linear_q,       // x[..., K], bias[N]?, W's packed tensors...; attrs.packed = W [N, K] (ops/linear_q.h);
                  // attrs.i1 = 1 + UnaryFn: that activation of the result rounded to x's dtype (linear_q_act), 0: none
  mul_add,        // a, b, c (floats, numpy broadcasting): a * b + c in f32 from the exactly widened inputs,
                  // rounded once to attrs.dtype (attrs.flag: a * b rounded to attrs.dtype first, as torch's
                  // two ops in that dtype); no fused multiply-add (the chains it replaces round the product)
  rms_norm_rope,  // cos[S, D], sin[S, D], then x_k[B, S_k, H, D], w_k[D]? per segment (sum S_k = S); attrs.f0 = eps:
                  // rope(concat_k(rms_norm(x_k, w_k)), dim 1), cos, sin), each norm rounded to x's dtype first;
                  // where a device has no kernel (and while a trace records) ops::rms_norm_rope runs those ops
  count_
};

enum class BinaryFn : int64_t { add, sub, mul, div, maximum, minimum };
enum class ScalarFn : int64_t { add, mul, rsub, pow };  // x+s, x*s, s-x, x^s
enum class UnaryFn : int64_t {
  silu, gelu_tanh, gelu_erf, quick_gelu, exp, neg, sqrt, rsqrt, tanh, sigmoid, sin, cos, abs, square
};
enum class ReduceFn : int64_t { sum, mean, max };
// Where an image's channels are: [N, C, H, W] (PyTorch's default) or [N, H, W, C], the layout the CPU's
// oneDNN convolutions and cuDNN's tensor cores run on natively (ops::prefers_channels_last).
enum class ImageLayout : int64_t { channels_first = 0, channels_last = 1 };

std::string_view op_name(OpKind k);

class PackedWeight;  // ops/packed_weight.h

// Plain data of an op call; each op documents which fields it reads (above). Unused fields stay zero.
struct Attrs {
  int64_t i0 = 0;
  int64_t i1 = 0;
  double f0 = 0.0;
  double f1 = 0.0;
  bool flag = false;
  DType dtype = DType::f32;
  Device device{};
  std::vector<int64_t> ints;
  const PackedWeight* packed = nullptr;  // linear_q's weight (owned by its module, which outlives the call)
};

struct OpCall {
  OpKind kind;
  std::vector<Tensor> inputs;  // an optional input that is absent is an undefined Tensor
  Attrs attrs;
};

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

// Shape/dtype inference and input validation: throws Error naming the op and the offending shapes.
using InferFn = OutputMeta (*)(const OpCall&);
// Writes the result into `out`, a fresh contiguous tensor of the inferred meta.
using KernelFn = void (*)(const OpCall&, Tensor& out);

void register_kernel(OpKind k, DeviceKind d, KernelFn fn);
KernelFn find_kernel(OpKind k, DeviceKind d);  // nullptr when none
OutputMeta infer(const OpCall& call);

// The dispatch point: eager execution, or recording while a trace is active.
Tensor dispatch(OpCall call);
// Eager execution only (used by graph replay).
Tensor execute(const OpCall& call);
// Eager execution into a caller-provided output (same shape, dtype and device as the inferred meta),
// for copy / cast only: their CPU kernels accept an output view whose rows are contiguous (last stride
// 1), e.g. a frame range of a preallocated video; the CUDA kernels any output view. Not recordable: throws while a trace is active.
void execute_into(const OpCall& call, Tensor& out);
// linear_q's eager execution into a caller-provided view of its result (same shape, dtype and device, rows
// contiguous): its kernel, handed the view as out, writes into it where it can (the CPU's packed bf16 linear),
// else returns its own result, which is copied in. Not recordable: throws while a trace is active.
void execute_linear_q_into(const OpCall& call, const Tensor& out);

}  // namespace diffq::ops
