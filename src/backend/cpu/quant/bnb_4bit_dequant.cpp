// The Highway kernel of bnb_4bit_dequant.h. For F float lanes, each iteration handles F consecutive elements
// (F/2 packed bytes): lane j reads byte (j >> 1) and picks code (j & 1) of it through a gather from the
// 512-float pair table, then one multiply by the block's absmax. The range is split at block
// boundaries so every vector has a single scale.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant/bnb_4bit_dequant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "backend/cpu/quant/bnb_4bit_dequant.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Dequant4Range(const uint8_t* packed, int64_t nbytes, const float* pairs, const float* absmax, int64_t block0,
                   int64_t bs, int64_t e0, int64_t e1, float* dst) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint8_t, decltype(du)> du8;
  const int64_t F = int64_t(hn::Lanes(df));
  // Lane j takes byte j/2 (the loaded bytes are promoted one per lane: lane k holds byte k) and code j&1.
  HWY_ALIGN int32_t dup_idx[hn::MaxLanes(di)];
  HWY_ALIGN int32_t parity[hn::MaxLanes(di)];
  for (int64_t j = 0; j < F; ++j) {
    dup_idx[j] = int32_t(j >> 1);
    parity[j] = int32_t(j & 1);
  }
  const auto tbl = hn::SetTableIndices(du, dup_idx);
  const auto par = hn::Load(du, reinterpret_cast<const uint32_t*>(parity));

  int64_t e = e0;
  while (e < e1) {
    const int64_t blk = e / bs;
    const int64_t seg_end = std::min(e1, (blk + 1) * bs);
    const float scale = absmax[blk - block0];
    if (e & 1) {  // odd start: the low nibble of a byte
      dst[e - e0] = pairs[2 * packed[e >> 1] + 1] * scale;
      ++e;
    }
    const auto vs = hn::Set(df, scale);
    // F elements need F/2 bytes, but the promote loads F bytes: stay inside the buffer.
    for (; F >= 2 && e + F <= seg_end && (e >> 1) + F <= nbytes; e += F) {
      const auto bytes = hn::PromoteTo(du, hn::LoadU(du8, packed + (e >> 1)));
      const auto b = hn::TableLookupLanes(bytes, tbl);
      const auto idx = hn::Add(hn::ShiftLeft<1>(b), par);
      const auto v = hn::GatherIndex(df, pairs, hn::BitCast(di, idx));
      hn::StoreU(hn::Mul(v, vs), df, dst + (e - e0));
    }
    for (; e < seg_end; ++e) dst[e - e0] = pairs[2 * packed[e >> 1] + (e & 1)] * scale;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(Dequant4Range);

void dequant_4bit_range(const uint8_t* packed, int64_t nbytes, const float* pairs512, const float* absmax,
                        int64_t block0, int64_t blocksize, int64_t e0, int64_t e1, float* dst) {
  if (e1 <= e0) return;
  HWY_DYNAMIC_DISPATCH(Dequant4Range)(packed, nbytes, pairs512, absmax, block0, blocksize, e0, e1, dst);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
