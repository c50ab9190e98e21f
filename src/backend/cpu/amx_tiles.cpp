#include "backend/cpu/amx_tiles.h"

#include <immintrin.h>

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

DIFFQ_AMX_TARGET void amx_load_tile_config() { _tile_loadconfig(&kTileConfig); }

DIFFQ_AMX_TARGET void amx_release_tiles() { _tile_release(); }

}  // namespace diffq::backend::cpu
