#include "quant/bnb/bnb_4bit_dequant.h"

namespace diffq::quant::bnb {

void build_pair_table(const float* code16, float* pairs512) {
  for (int b = 0; b < 256; ++b) {
    pairs512[2 * b] = code16[b >> 4];
    pairs512[2 * b + 1] = code16[b & 15];
  }
}

void dequant_4bit_range_scalar(const uint8_t* packed, int64_t nbytes, const float* pairs512, const float* absmax,
                               int64_t block0, int64_t blocksize, int64_t e0, int64_t e1, float* dst) {
  (void)nbytes;
  for (int64_t e = e0; e < e1; ++e) {
    const uint8_t byte = packed[e >> 1];
    const int nib = (e & 1) ? (byte & 15) : (byte >> 4);
    dst[e - e0] = pairs512[2 * (nib << 4 | nib)] * absmax[e / blocksize - block0];
  }
}

}  // namespace diffq::quant::bnb
