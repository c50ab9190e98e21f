// Flux latent packing / ids against FluxPipeline (tests/fixtures/tiny-flux*/reference/generate).
#include <gtest/gtest.h>

#include <bit>
#include <string>

#include "diffq/error.h"
#include "core/random.h"
#include "io/safetensors.h"
#include "pipelines/flux_latents.h"

namespace {

using diffq::Tensor;
namespace flux = diffq::flux;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> b;
  for (float x : t.to_f32_vector()) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST(FluxLatents, GridFloorsToVaeScaleTimesTwo) {
  EXPECT_EQ(flux::latent_grid(1024, 1024).h, 128);
  EXPECT_EQ(flux::latent_grid(1024, 1024).seq_len(), 4096);
  auto g = flux::latent_grid(1000, 520);  // floored to 992 x 512
  EXPECT_EQ(g.h, 124);
  EXPECT_EQ(g.w, 64);
  EXPECT_EQ(flux::latent_grid(32, 32, 2).seq_len(), 64);
  EXPECT_THROW(flux::latent_grid(8, 1024), diffq::Error);
}

TEST(FluxLatents, PackIndexIsChannelTimesFourPlusDyTimesTwoPlusDx) {
  const int64_t b = 2, c = 3, h = 4, w = 6;
  Tensor x = Tensor::arange(b * c * h * w).reshape({b, c, h, w});
  Tensor p = flux::pack_latents(x);
  ASSERT_EQ(p.shape(), (diffq::Shape{b, (h / 2) * (w / 2), c * 4}));
  const auto pv = p.to_f32_vector();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t tok = (y / 2) * (w / 2) + xx / 2, k = ch * 4 + (y % 2) * 2 + xx % 2;
          ASSERT_EQ(pv[size_t((bi * (h / 2) * (w / 2) + tok) * c * 4 + k)],
                    float(((bi * c + ch) * h + y) * w + xx));
        }
  // Round trip (vae_scale_factor 1: height = h, width = w map to the same grid).
  Tensor back = flux::unpack_latents(p, h, w, 1);
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(back.to_f32_vector(), x.to_f32_vector());
  EXPECT_THROW(flux::pack_latents(Tensor::zeros({1, 4, 3, 4}, diffq::DType::f32)), diffq::Error);
  EXPECT_THROW(flux::unpack_latents(p, 8, 8, 1), diffq::Error);  // token count mismatch
}

TEST(FluxLatents, IdsAndVaeInputMatchTheFixtures) {
  for (const char* folder : {"tiny-flux", "tiny-flux-schnell"}) {
    SCOPED_TRACE(folder);
    auto gen = diffq::io::SafetensorsFile::open(kFix + folder + "/reference/generate.safetensors");
    const int64_t max_seq = std::string(folder) == "tiny-flux" ? 512 : 256;
    // 32x32 image, tiny VAE scale factor 2 -> 16x16 latent -> 8x8 packed grid.
    const auto g = flux::latent_grid(32, 32, 2);
    Tensor img_ids = flux::prepare_latent_image_ids(g.h / 2, g.w / 2);
    EXPECT_EQ(img_ids.shape(), gen.tensor("img_ids").shape());
    EXPECT_EQ(bits_of(img_ids), bits_of(gen.tensor("img_ids")));
    Tensor txt_ids = flux::prepare_text_ids(max_seq);
    EXPECT_EQ(txt_ids.shape(), gen.tensor("txt_ids").shape());
    EXPECT_EQ(bits_of(txt_ids), bits_of(gen.tensor("txt_ids")));

    Tensor packed = gen.tensor("step1.latents_out");
    Tensor z = flux::scale_latents_for_vae(flux::unpack_latents(packed, 32, 32, 2), 0.3611, 0.1159);
    EXPECT_EQ(z.shape(), gen.tensor("vae_decoder_in").shape());
    EXPECT_EQ(bits_of(z), bits_of(gen.tensor("vae_decoder_in")));
    // step0's input is the packed seed-0 noise; packing is the inverse of unpacking.
    Tensor l0 = gen.tensor("step0.latents_in");
    EXPECT_EQ(bits_of(flux::pack_latents(flux::unpack_latents(l0, 32, 32, 2))), bits_of(l0));
    // ... and is exactly prepare_latents: randn([1, 4, 16, 16], seed 0), packed.
    diffq::Generator gen0(0);
    EXPECT_EQ(bits_of(flux::pack_latents(diffq::randn_tensor({1, 4, 16, 16}, gen0))),
              bits_of(l0));
  }
}

// bf16 latents: torch divides by the scale as float32 but rounds the shift to bf16 before adding.
// Reference: torch 2.15, (randn([1, 2, 4, 4], seed 5).to(bf16) / 0.3611 + 0.1159) bits.
TEST(FluxLatents, Bf16VaeInputScalingMatchesTorch) {
  diffq::Generator g(5);
  Tensor x = diffq::randn({1, 2, 4, 4}, g, diffq::DType::bf16);
  Tensor z = flux::scale_latents_for_vae(x, 0.3611, 0.1159);
  ASSERT_EQ(z.dtype(), diffq::DType::bf16);
  const std::vector<uint16_t> want = {
      0x40a7, 0x3fc7, 0xc094, 0xc093, 0x40b7, 0xbf21, 0xbe7e, 0xc078, 0x3f99, 0x3d82, 0xc069,
      0xbff3, 0x4036, 0xbf86, 0xbfc1, 0xc003, 0x40fa, 0x405f, 0xbf50, 0xc024, 0xbe7a, 0xbfc6,
      0x3f04, 0xbe99, 0xbf8c, 0x4011, 0xbd3a, 0xc0b0, 0x4088, 0x3fbe, 0x3f4f, 0x409f};
  const uint16_t* p = z.contiguous().data<uint16_t>();
  EXPECT_EQ(std::vector<uint16_t>(p, p + z.numel()), want);
}

}  // namespace
