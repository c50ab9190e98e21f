#include "pipelines/flux_latents.h"

#include <vector>

#include "diffq/error.h"

namespace diffq::flux {

namespace {
constexpr const char* kCtx = "flux latents";

bool is_float_dtype(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

std::vector<float> round_to(const std::vector<float>& v, DType d) {
  if (d == DType::f32) return v;
  return Tensor::from_vector(v, {int64_t(v.size())}, d).to_f32_vector();
}
}  // namespace

LatentGrid latent_grid(int64_t height, int64_t width, int64_t vae_scale_factor) {
  check(height > 0 && width > 0 && vae_scale_factor > 0, kCtx, "invalid size ", height, "x", width,
        " (vae_scale_factor ", vae_scale_factor, ")");
  LatentGrid g;
  g.h = 2 * (height / (vae_scale_factor * 2));
  g.w = 2 * (width / (vae_scale_factor * 2));
  check(g.h > 0 && g.w > 0, kCtx, "image ", height, "x", width, " is smaller than one latent patch (",
        vae_scale_factor * 2, " pixels)");
  return g;
}

Tensor pack_latents(const Tensor& x) {
  check(x.dim() == 4, kCtx, "pack_latents expects [B, C, H, W], got ", x.str());
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  check(h % 2 == 0 && w % 2 == 0, kCtx, "pack_latents needs an even height and width, got ", x.str());
  return x.contiguous()
      .view({b, c, h / 2, 2, w / 2, 2})  // [B, C, h/2, dy, w/2, dx]
      .permute({0, 2, 4, 1, 3, 5})       // [B, h/2, w/2, C, dy, dx]
      .reshape({b, (h / 2) * (w / 2), c * 4});
}

Tensor unpack_latents(const Tensor& x, int64_t height, int64_t width, int64_t vae_scale_factor) {
  check(x.dim() == 3, kCtx, "unpack_latents expects [B, tokens, C*4], got ", x.str());
  const LatentGrid g = latent_grid(height, width, vae_scale_factor);
  const int64_t b = x.size(0), n = x.size(1), c4 = x.size(2);
  check(n == g.seq_len(), kCtx, "unpack_latents: ", x.str(), " has ", n, " tokens but a ", height, "x",
        width, " image has ", g.seq_len());
  check(c4 % 4 == 0, kCtx, "unpack_latents: channels ", c4, " are not a multiple of 4");
  return x.contiguous()
      .view({b, g.h / 2, g.w / 2, c4 / 4, 2, 2})  // [B, h/2, w/2, C, dy, dx]
      .permute({0, 3, 1, 4, 2, 5})                // [B, C, h/2, dy, w/2, dx]
      .reshape({b, c4 / 4, g.h, g.w});
}

Tensor prepare_latent_image_ids(int64_t h2, int64_t w2, DType dtype) {
  check(h2 > 0 && w2 > 0, kCtx, "image id grid must be positive, got ", h2, "x", w2);
  std::vector<float> v(size_t(h2 * w2 * 3), 0.0f);
  for (int64_t r = 0; r < h2; ++r)
    for (int64_t c = 0; c < w2; ++c) {
      const size_t i = size_t(r * w2 + c) * 3;
      v[i + 1] = float(r);
      v[i + 2] = float(c);
    }
  return Tensor::from_vector(v, {h2 * w2, 3}, dtype);
}

Tensor prepare_text_ids(int64_t max_sequence_length, DType dtype) {
  check(max_sequence_length > 0, kCtx, "max_sequence_length must be positive, got ",
        max_sequence_length);
  return Tensor::zeros({max_sequence_length, 3}, dtype);
}

Tensor scale_latents_for_vae(const Tensor& latents, double scaling_factor, double shift_factor) {
  const DType d = latents.dtype();
  check(is_float_dtype(d), kCtx, "latents must be float32, bfloat16 or float16, got ", dtype_name(d));
  check(scaling_factor != 0.0, kCtx, "scaling_factor is 0");
  const float s = float(scaling_factor), sh = float(shift_factor);
  std::vector<float> v = latents.to_f32_vector();
  // torch: division by a Python scalar uses the scalar as float (opmath); addition of a Python
  // scalar first rounds it to the tensor's dtype (checked against torch 2.15 for bf16 and f16).
  const float sh_d = round_to({sh}, d)[0];
  for (float& x : v) x = x / s;
  v = round_to(v, d);
  for (float& x : v) x = x + sh_d;
  return Tensor::from_vector(v, latents.shape(), d).to(latents.device());  // host maths, back to the latents' device
}

}  // namespace diffq::flux
