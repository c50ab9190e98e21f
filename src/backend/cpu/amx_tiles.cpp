#include "backend/cpu/amx_tiles.h"

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/cpu_features.h"

namespace diffq::backend::cpu {

namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// At namespace scope: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes only, so the stores of a
// local configuration's other bytes could be dropped as dead (SIGILL on the first tile instruction).
constexpr TileConfig make_tile_config() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  return cfg;
}
const TileConfig kTileConfig = make_tile_config();

}  // namespace

bool amx_int8_usable() {
  static const bool ok = cpu_features().amx_tile && cpu_features().amx_int8 && amx_tiles_permitted();
  return ok;
}

bool amx_bf16_usable() {
  static const bool ok = cpu_features().amx_tile && cpu_features().amx_bf16 && amx_tiles_permitted();
  return ok;
}

void amx_copy_padded_rows(const void* src, int64_t src_stride, int64_t rows, int64_t row_bytes, int64_t ld, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < (rows + 31) / 32 * 32; ++i, d += ld) {
    const int64_t n = i < rows ? row_bytes : 0;
    if (n) std::memcpy(d, s + i * src_stride, size_t(n));
    std::memset(d + n, 0, size_t(ld - n));
  }
}

DIFFQ_AMX_TARGET void amx_load_tile_config() { _tile_loadconfig(&kTileConfig); }

DIFFQ_AMX_TARGET void amx_release_tiles() { _tile_release(); }

}  // namespace diffq::backend::cpu
