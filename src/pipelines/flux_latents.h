// Flux latent layout helpers (Diffusers FluxPipeline: _pack_latents, _unpack_latents,
// _prepare_latent_image_ids, the text ids of encode_prompt, and the VAE input scaling).
//
// Packing folds each 2x2 patch of the [B, C, H, W] latent into the channel axis:
// packed[b, r*(W/2) + c, ch*4 + dy*2 + dx] = x[b, ch, 2r + dy, 2c + dx] (row-major patches).
#pragma once

#include <cstdint>

#include "diffq/tensor.h"

namespace diffq::flux {

// The latent grid of an image: h = 2 * floor(height / (vae_scale_factor * 2)), same for w (Diffusers
// floors the image size to a multiple of vae_scale_factor * 2).
struct LatentGrid {
  int64_t h = 0, w = 0;
  int64_t seq_len() const { return (h / 2) * (w / 2); }  // packed tokens = image_seq_len
};
LatentGrid latent_grid(int64_t height, int64_t width, int64_t vae_scale_factor = 8);

// [B, C, H, W] -> [B, (H/2)(W/2), C*4]; H and W must be even. Any dtype; returns a contiguous tensor.
Tensor pack_latents(const Tensor& latents);

// [B, (h/2)(w/2), C*4] -> [B, C, h, w] with (h, w) = latent_grid(height, width, vae_scale_factor).
Tensor unpack_latents(const Tensor& packed, int64_t height, int64_t width, int64_t vae_scale_factor = 8);

// img_ids [(h/2)(w/2), 3]: row r*(w/2)+c = (0, r, c); h2 = h/2, w2 = w/2 (packed grid).
Tensor prepare_latent_image_ids(int64_t h2, int64_t w2, DType dtype = DType::f32);

// txt_ids: zeros [max_sequence_length, 3].
Tensor prepare_text_ids(int64_t max_sequence_length, DType dtype = DType::f32);

// latents / scaling_factor + shift_factor, each op rounded to the latents' dtype as torch does: the
// divisor is used as float32, the shift is first rounded to the latents' dtype (bf16/f16).
Tensor scale_latents_for_vae(const Tensor& latents, double scaling_factor, double shift_factor);

}  // namespace diffq::flux
