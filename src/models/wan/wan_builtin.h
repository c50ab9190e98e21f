// Named Wan transformer configurations that need no download (benchmarks' `builtin:` models), and a
// random-weight builder for them. Parameter counts equal Diffusers' WanTransformer3DModel built from
// the same config (tests/models/test_wan_transformer.cpp against tests/fixtures/wan-transformer/
// expected.json, counted by Diffusers 0.42.1 on the meta device).
//   wan-small       Wan2.1-1.3B's widths (12 heads x 128, ffn 8960, text 4096, freq 256, in/out 16) with
//                   2 layers: 118.7 M parameters, a CPU-sized model with the real GEMM / attention shapes.
//   wan-1.3b-shape  Wan2.1-T2V-1.3B's exact transformer config (30 layers): 1.419 B parameters.
//   wan-14b-shape   Wan2.1-T2V-14B's (= each Wan2.2-T2V-A14B expert's) config: 40 heads x 128, ffn 13824,
//                   40 layers: 14.288 B parameters (GPU only).
// Default benchmark inputs (latent grid, text length) are WanPipeline's: 81 frames at 480x832 ->
// latents [16, 21, 60, 104] (32760 tokens), 512 text tokens; wan-small: 17 frames at 256x256 ->
// [16, 5, 32, 32] (1280 tokens), 512 text tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/wan/wan_transformer.h"

namespace diffq::models::wan {

struct WanBuiltin {
  std::string name;
  WanTransformerConfig transformer;
  int64_t latent_frames = 21, latent_height = 60, latent_width = 104;  // the benchmark's latent grid
  int64_t text_tokens = 512;                                            // UMT5 sequence length
};

const std::vector<std::string>& builtin_wan_names();
WanBuiltin builtin_wan(std::string_view name);  // unknown name: error listing the known ones

// A state dict of N(0, std^2)-like random values (init_parameters_randn's stream) for every parameter
// of `cfg`, named as Diffusers' keys: `dtype` for all, except Diffusers' _keep_in_fp32_modules
// (time_embedder, scale_shift_table, norm2) in float32 as from_pretrained(dtype=...) would load them.
// Load it with WanTransformer3DModel::from_state_dict (quantization hooks apply as for a checkpoint).
StateDict random_wan_state_dict(const WanTransformerConfig& cfg, DType dtype, uint64_t seed, double std = 0.02);

// The model itself with those weights: from_state_dict(cfg, random_wan_state_dict(...), {dtype}).
std::unique_ptr<WanTransformer3DModel> random_wan_transformer(const WanTransformerConfig& cfg, DType dtype,
                                                              uint64_t seed, double std = 0.02);

}  // namespace diffq::models::wan
