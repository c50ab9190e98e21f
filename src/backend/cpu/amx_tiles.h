// What the CPU kernels on AMX share (attention_amx.cpp, int8_gemm_amx.cpp, bf16_gemm_amx.cpp): whether they can
// run, their padded operand rows, and the tile state: palette 1 with tiles 0-7 all 16 rows x 64 bytes (what 2 x 2
// accumulator blocks of 16 x 16 use: four C tiles, two A and two B tiles), loaded by the thread before its first
// tile instruction and released after its last.
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// The compile-time target of functions that use AMX tiles (and AVX-512 around them).
#define DIFFQ_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// Whether the AMX kernels can run here: the CPU has AMX-INT8 (int8_gemm_amx.h) / AMX-BF16 (bf16_gemm_amx.h,
// attention_amx.h) and the process may use the tile state (amx_tiles_permitted).
bool amx_int8_usable();
bool amx_bf16_usable();

// `rows` rows of row_bytes (src, row stride src_stride bytes) into dst (row stride ld bytes, 64-byte aligned),
// each zero-padded to ld bytes, then zero rows up to a multiple of 32: an operand the 2 x 2 tile blocks read in
// place (whole 16-row tiles, whole 64-byte steps).
void amx_copy_padded_rows(const void* src, int64_t src_stride, int64_t rows, int64_t row_bytes, int64_t ld, void* dst);

// Loads the 8 x (16 rows x 64 bytes) configuration on the calling thread. Requires amx_tiles_permitted().
void amx_load_tile_config();
// Releases the tiles (the thread's tile state back to its init state).
void amx_release_tiles();

}  // namespace diffq::backend::cpu
