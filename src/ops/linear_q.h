// The quantized linear as an op: linear_q(x, packed weight W, bias) = x @ W^T + b in x's dtype, with
// inputs {x, bias (may be undefined), W's packed tensors...} and attrs.packed = W. Its kernels are chosen
// per device and per scheme (ggml's type traits per backend, MLX's QuantizedMatmul per device): a backend
// registers one for a scheme, or "*" for every scheme it can compute generically (the CPU's: the weight's
// tile linear plan, else its dequantization). A device without one for a scheme refuses the call, and a
// pipeline placed there refuses the weight at load (pipelines/pipeline_device.cpp), naming both.
// A linear_q kernel is handed `out` undefined and sets it to the result it allocates (the schemes' drivers
// allocate their own outputs); the dispatcher checks its shape, dtype and device.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/op.h"
#include "ops/packed_weight.h"

namespace diffq::ops {

void register_linear_q_kernel(DeviceKind d, std::string_view scheme, KernelFn fn);
// The kernel for `scheme` on `d`: the scheme's own, else the device's "*", else nullptr.
KernelFn find_linear_q_kernel(DeviceKind d, std::string_view scheme);
// Removes and returns every kernel registered for `d` as (scheme, kernel): tests' fake devices take the
// real device's kernels away for their lifetime and register them again after.
std::vector<std::pair<std::string, KernelFn>> take_linear_q_kernels(DeviceKind d);

// x [..., K] (float) -> [..., N] in x's dtype.
Tensor linear_q(const Tensor& x, const PackedWeight& w, const Tensor& bias = {});

}  // namespace diffq::ops
