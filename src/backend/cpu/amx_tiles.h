// The AMX tile state the CPU kernels on AMX share (attention_amx.cpp, int8_gemm_amx.cpp): palette 1 with
// tiles 0-7 all 16 rows x 64 bytes (what 2 x 2 accumulator blocks of 16 x 16 use: four C tiles, two A and
// two B tiles), loaded by the thread before its first tile instruction and released after its last.
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// The compile-time target of functions that use AMX tiles (and AVX-512 around them).
#define DIFFQ_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// Loads the 8 x (16 rows x 64 bytes) configuration on the calling thread. Requires amx_tiles_permitted().
void amx_load_tile_config();
// Releases the tiles (the thread's tile state back to its init state).
void amx_release_tiles();

}  // namespace diffq::backend::cpu
