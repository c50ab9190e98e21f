// Flux latent packing / ids against FluxPipeline (tests/fixtures/tiny-flux*/reference/generate).
#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <nlohmann/json.hpp>
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

// FluxPipeline.prepare_latents(..., dtype=bfloat16) on the tiny pipeline (randn_tensor, _pack_latents,
// _prepare_latent_image_ids), _unpack_latents and the pipeline's VAE input scaling (torch divides by the scale
// as float32 but rounds the shift to bf16 before adding), from tools/reference/make_reference_values.py:
// one generator (batch 1) and a list of two (batch 2, 16 channels, non-square).
TEST(FluxLatents, Bf16PrepareUnpackAndVaeScalingMatchFluxPipeline) {
  auto values = diffq::io::SafetensorsFile::open(kFix + "reference-values/values.safetensors");
  std::ifstream in(kFix + "reference-values/params.json");
  const auto p = nlohmann::json::parse(in).at("latents");
  const int64_t vsf = p.at("vae_scale_factor");
  int checked = 0;
  for (const auto& [name, c] : p.at("cases").items()) {
    SCOPED_TRACE(name);
    const int64_t b = c.at("batch_size"), ch = c.at("num_channels_latents"), height = c.at("height"),
                  width = c.at("width");
    const auto g = flux::latent_grid(height, width, vsf);
    std::vector<diffq::Generator> gens;
    for (uint64_t seed : c.at("seeds").get<std::vector<uint64_t>>()) gens.emplace_back(seed);
    const Tensor noise = gens.size() == 1 ? diffq::randn_tensor({b, ch, g.h, g.w}, gens[0], diffq::DType::bf16)
                                          : diffq::randn_tensor({b, ch, g.h, g.w}, gens, diffq::DType::bf16);
    const std::string k = "latents." + name;
    const Tensor packed = flux::pack_latents(noise);
    ASSERT_EQ(packed.dtype(), diffq::DType::bf16);
    ASSERT_EQ(packed.shape(), values.tensor(k + ".packed").shape());
    EXPECT_EQ(bits_of(packed), bits_of(values.tensor(k + ".packed")));
    const Tensor ids = flux::prepare_latent_image_ids(g.h / 2, g.w / 2, diffq::DType::bf16);
    EXPECT_EQ(ids.dtype(), diffq::DType::bf16);
    EXPECT_EQ(ids.shape(), values.tensor(k + ".img_ids").shape());
    EXPECT_EQ(bits_of(ids), bits_of(values.tensor(k + ".img_ids")));
    const Tensor unpacked = flux::unpack_latents(values.tensor(k + ".packed"), height, width, vsf);
    EXPECT_EQ(unpacked.shape(), values.tensor(k + ".unpacked").shape());
    EXPECT_EQ(bits_of(unpacked), bits_of(values.tensor(k + ".unpacked")));
    const Tensor z = flux::scale_latents_for_vae(unpacked, p.at("scaling_factor"), p.at("shift_factor"));
    ASSERT_EQ(z.dtype(), diffq::DType::bf16);
    EXPECT_EQ(bits_of(z), bits_of(values.tensor(k + ".vae_in")));
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
