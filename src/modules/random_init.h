// Random parameters for models built from a config alone (benchmarks need no download): every
// parameter of a module tree gets N(0, std^2) values, created directly in `dtype` one parameter at a
// time (the f32 draw of one parameter is the only transient copy), deterministic for a seed and
// independent of the thread count (not torch's random stream: values only need to be plausible).
#pragma once

#include <cstdint>

#include "diffq/dtype.h"
#include "modules/module.h"

namespace diffq {

void init_parameters_randn(Module& m, DType dtype, uint64_t seed, double std = 0.02);

}  // namespace diffq
