#include "quant/bfl/nvfp4_weight.h"

#include "diffq/error.h"
#include "quant/bfl/e2m1.h"

namespace diffq::quant {

Nvfp4Weight::Nvfp4Weight(Tensor packed, Tensor block_scale, Tensor weight_scale_2, std::string scheme,
                         const std::string& what)
    : ScaledWeight(packed.dim() == 2 ? packed.size(0) : 0, packed.dim() == 2 ? 2 * packed.size(1) : 0,
                   std::move(scheme)) {
  constexpr const char* ctx = "quant.nvfp4";
  check(packed.dim() == 2 && packed.dtype() == DType::u8, ctx, what, ": the weight must be uint8 [N, K/2] (two E2M1 codes per byte), got ",
        packed.str());
  check(k_ % kNvfp4Block == 0, ctx, what, ": in_features ", k_, " is not a multiple of the NVFP4 block ", kNvfp4Block);
  check(block_scale.dtype() == DType::f8_e4m3fn && block_scale.dim() == 2 && block_scale.size(0) == n_ &&
            block_scale.size(1) == k_ / kNvfp4Block,
        ctx, what, ": weight_scale must be float8_e4m3fn [", n_, ", ", k_ / kNvfp4Block, "], got ", block_scale.str());
  check(weight_scale_2.dtype() == DType::f32 && weight_scale_2.numel() == 1, ctx, what,
        ": weight_scale_2 must be one float32 value, got ", weight_scale_2.str());
  packed_ = packed.contiguous();
  block_scale_ = block_scale.contiguous();
  weight_scale_2_ = weight_scale_2.contiguous();
  ws2_ = weight_scale_2_.to_f32_vector()[0];
}

void Nvfp4Weight::dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const {
  const auto* p = static_cast<const uint8_t*>(packed_.data_ptr());
  const auto* bs = static_cast<const uint8_t*>(block_scale_.data_ptr());
  const int64_t half = k_ / 2, nb = k_ / kNvfp4Block;
  for (int64_t r = n0; r < n1; ++r) {
    float* d = dst + (r - n0) * k_;
    for (int64_t b = 0; b < nb; ++b) {
      const float scale = f8_e4m3fn_to_f32(bs[r * nb + b]) * ws2_;  // (weight_scale.float() * weight_scale_2)
      for (int64_t j = 0; j < kNvfp4Block / 2; ++j) {
        const uint8_t byte = p[r * half + b * (kNvfp4Block / 2) + j];
        d[b * kNvfp4Block + 2 * j] = e2m1_to_f32(byte & 0x0f) * scale;
        d[b * kNvfp4Block + 2 * j + 1] = e2m1_to_f32(byte >> 4) * scale;
      }
    }
  }
}

std::shared_ptr<Nvfp4Weight> Nvfp4Weight::rows(const RowRanges& ranges, const std::string& what) const {
  auto w = std::make_shared<Nvfp4Weight>(select_rows(packed_, ranges, what),
                                         select_rows(block_scale_, ranges, what + " weight_scale"), weight_scale_2_,
                                         scheme_, what);
  w->input_scale_ = input_scale_;
  w->pre_quant_scale_ = pre_quant_scale_;
  return w;
}

}  // namespace diffq::quant
