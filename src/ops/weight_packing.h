// Dense linear weights packed once for a device's GEMM (IPEX's prepacked linear, ggml's repacking
// buffer types): a backend may register a packer that turns a dense [N, K] weight into a PackedWeight
// in the layout its GEMM reads, with a linear_q kernel for that scheme (ops/linear_q.h) and the exact
// dense weight back from dequantize(). The layers above ask through pack_linear_weight, never naming a
// backend; a Parameter holds one form at a time (modules/parameter.h).
#pragma once

#include <functional>
#include <memory>

#include "ops/packed_weight.h"

namespace diffq::ops {

// Returns w packed for its device's linear of inputs of dtype x_dtype, or null where the device packs
// none of this kind (its choice: dtypes, shape, CPU, tuning).
using WeightPacker = std::function<std::shared_ptr<PackedWeight>(const Tensor& w, DType x_dtype)>;
void register_weight_packer(DeviceKind d, WeightPacker fn);  // an empty fn removes it

// The packed form of the dense weight w [N, K] for inputs x [..., K] of x_dtype on x_device (w's device),
// or null (nothing packs it).
std::shared_ptr<PackedWeight> pack_linear_weight(const Tensor& w, DType x_dtype, Device x_device);

}  // namespace diffq::ops
