// A linear op whose output is a row-strided view (a slice of an elided concat's buffer, elide_concat.cpp):
// the GEMM writes each part of C straight there with the slice's row stride as its ld.
#pragma once

#include <vector>

#include "diffq/tensor.h"

namespace diffq::backend::cpu {

// inputs: x, w[, bias] as the linear op's; out: the op's output shape and float dtype, last stride 1,
// its rows (all leading dims) one stride apart. The values are the linear kernel's (the same GEMM calls
// through linear_parts, one rounding to out's dtype).
void run_linear_strided(const std::vector<Tensor>& inputs, Tensor& out);

}  // namespace diffq::backend::cpu
