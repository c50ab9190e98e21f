// The quantized linear as an op: linear_q(x, packed weight W, bias) = x @ W^T + b in x's dtype, with
// inputs {x, bias (may be undefined), W's packed tensors...} and attrs.packed = W. Its kernels are chosen
// per device and per scheme (ggml's type traits per backend, MLX's QuantizedMatmul per device): a backend
// registers one for a scheme, or "*" for every scheme it can compute generically (the CPU's: the weight's
// tile linear plan, else its dequantization). A device without one for a scheme refuses the call, and a
// pipeline placed there refuses the weight at load (pipelines/pipeline_device.cpp), naming both.
// A linear_q kernel is handed `out` undefined and sets it to the result it allocates (the schemes' drivers
// allocate their own outputs); the dispatcher checks its shape, dtype and device. Called for linear_q_into it
// is handed the caller's view instead: it may write into it, else sets out to its own result (copied in).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/op.h"
#include "ops/packed_weight.h"

namespace diffq::ops {

// applies_activation: the kernel also computes linear_q_act's activation (attrs.i1 = 1 + UnaryFn; 0 = none):
// fn of each result element already rounded to x's dtype, rounded again, as the unary op after the linear
// would. Only such kernels are handed a call with attrs.i1 != 0.
void register_linear_q_kernel(DeviceKind d, std::string_view scheme, KernelFn fn, bool applies_activation = false);
// The kernel for `scheme` on `d`: the scheme's own, else the device's "*", else nullptr.
KernelFn find_linear_q_kernel(DeviceKind d, std::string_view scheme);
// Whether the kernel linear_q finds for `scheme` on `d` was registered with applies_activation.
bool linear_q_applies_activation(DeviceKind d, std::string_view scheme);
// Removes and returns every kernel registered for `d` as (scheme, kernel): tests' fake devices take the
// real device's kernels away for their lifetime and register them again after (without applies_activation).
std::vector<std::pair<std::string, KernelFn>> take_linear_q_kernels(DeviceKind d);

// x [..., K] (float) -> [..., N] in x's dtype.
Tensor linear_q(const Tensor& x, const PackedWeight& w, const Tensor& bias = {});

// unary(linear_q(x, w, bias), act) with the same values: one op where x's device's kernel for w's scheme
// applies the activation while the output is in cache (the FFNs' GELU: the linear's output written and
// read once, not three times), else the two ops. While a trace records, always the two ops (compiled
// graphs fuse activations into their GEMM parts their own way).
Tensor linear_q_act(const Tensor& x, const PackedWeight& w, const Tensor& bias, UnaryFn act);
// linear_q_act(x, w, bias, act) (act empty: linear_q) written into `out`, a view of the result's shape, dtype
// and device whose rows are contiguous (the columns of a preallocated concat: FLUX's single blocks write their
// MLP next to the attention's output, so proj_out reads both without a concat's copy): the same values. A kernel
// handed a defined out writes into it where it can, else sets out to its own result (copied in). Eager only.
void linear_q_into(const Tensor& x, const PackedWeight& w, const Tensor& bias, std::optional<UnaryFn> act,
                   const Tensor& out);
// The activation a linear_q call asks its kernel for (attrs.i1), if any.
inline std::optional<UnaryFn> linear_q_activation(const OpCall& c) {
  if (c.attrs.i1 <= 0) return std::nullopt;
  return UnaryFn(c.attrs.i1 - 1);
}

}  // namespace diffq::ops
