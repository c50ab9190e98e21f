// 2-D transposes of 2- and 4-byte elements: the layout changes around oneDNN's convolution, which runs in
// channels-last (NHWC) while diffq's tensors are NCHW: per image [C, H*W] -> [H*W, C] before it and back
// after it (band by band, onednn_conv.cpp), instead of oneDNN's reorder: cache-blocked 8 x 8 register
// transposes (docs/benchmarks.md "Fourth AMX session").
#pragma once

#include <cstddef>
#include <cstdint>

namespace diffq::backend::cpu {

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (elements of elem_bytes: 2 or 4), split over
// diffq's threads (inline inside a parallel region). src and dst must not overlap.
void transpose_2d(size_t elem_bytes, int64_t rows, int64_t cols, const void* src, int64_t lds, void* dst,
                  int64_t ldd);

// The same element by element, single-threaded: the reference.
void transpose_2d_reference(size_t elem_bytes, int64_t rows, int64_t cols, const void* src, int64_t lds, void* dst,
                            int64_t ldd);

}  // namespace diffq::backend::cpu
