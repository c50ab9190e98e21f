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

// Returns w packed for its device's linear of inputs like x, or null where the device packs none of this
// kind (its choice: dtypes, shape, CPU, tuning).
using WeightPacker = std::function<std::shared_ptr<PackedWeight>(const Tensor& w, const Tensor& x)>;
void register_weight_packer(DeviceKind d, WeightPacker fn);  // an empty fn removes it

// The packed form of the dense weight w [N, K] for x [..., K] on w's device, or null (nothing packs it).
std::shared_ptr<PackedWeight> pack_linear_weight(const Tensor& w, const Tensor& x);

}  // namespace diffq::ops
