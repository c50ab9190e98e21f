// The decoding parameters of a packed weight (block_values.cuh) read off the weight itself: the kernels'
// host code and the host-side decoding tests build them here, once.
#pragma once

#include "backend/cuda/quant/block_values.cuh"
#include "quant/autoround/autoround_weight.h"
#include "quant/quanto/quanto.h"
#include "quant/sdnq/sdnq_weight.h"

namespace diffq::backend::cuda {

blockq::QuantoParams quanto_params(const quant::QuantoWeight& w);
blockq::SdnqParams sdnq_params(const quant::sdnq::SdnqWeight& w);
blockq::AutoRoundParams autoround_params(const quant::autoround::AutoRoundWeight& w);

}  // namespace diffq::backend::cuda
