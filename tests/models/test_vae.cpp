// AutoencoderKL against Diffusers 0.42.1 (tests/fixtures/tiny-flux: the tiny random-weight VAE and
// its reference tensors from tools/reference). Tolerances: fp32 max relative error <= 1e-4;
// bf16 compute: against Diffusers' own bf16 run (see Bf16ComputeMatchesDiffusersBf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "backend/cpu/tuning.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "io/safetensors.h"
#include "models/vae/autoencoder_kl.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::vae;

namespace {

std::filesystem::path tiny_flux() {
  return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures" / "tiny-flux";
}

const io::SafetensorsFile& reference() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(tiny_flux() / "reference" / "vae.safetensors");
  return f;
}

// max |a - b| / max |b|, both read as f32.
double max_rel(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  Tensor a = got.to(DType::f32).contiguous(), b = want.to(DType::f32).contiguous();
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    ref = std::max(ref, double(std::fabs(b.data<float>()[i])));
  }
  return diff / std::max(ref, 1e-30);
}

// Diffusers' own bfloat16 run of the same VAE on the same inputs cast to bf16 (FluxPipeline.from_pretrained(
// dir, dtype=torch.bfloat16).vae; tools/reference/make_tiny_flux.py): the reference of a bf16 port.
const io::SafetensorsFile& reference_bf16() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(tiny_flux() / "reference" / "vae_bf16.safetensors");
  return f;
}

std::unique_ptr<AutoencoderKL> load_tiny(std::optional<DType> dtype = std::nullopt) {
  LoadOptions opt;
  opt.dtype = dtype;
  return AutoencoderKL::from_pretrained(tiny_flux() / "vae", opt);
}

}  // namespace

TEST(VaeConfig, DefaultsAreDiffusers) {
  const auto c = AutoencoderKLConfig::from_json(io::JsonConfig(nlohmann::json::object(), "test"));
  EXPECT_EQ(c.in_channels, 3);
  EXPECT_EQ(c.out_channels, 3);
  EXPECT_EQ(c.block_out_channels, std::vector<int64_t>{64});
  EXPECT_EQ(c.down_block_types, std::vector<std::string>{"DownEncoderBlock2D"});
  EXPECT_EQ(c.up_block_types, std::vector<std::string>{"UpDecoderBlock2D"});
  EXPECT_EQ(c.layers_per_block, 1);
  EXPECT_EQ(c.latent_channels, 4);
  EXPECT_EQ(c.norm_num_groups, 32);
  EXPECT_DOUBLE_EQ(c.scaling_factor, 0.18215);
  EXPECT_FALSE(c.shift_factor.has_value());
  EXPECT_TRUE(c.force_upcast);
  EXPECT_TRUE(c.use_quant_conv);
  EXPECT_TRUE(c.use_post_quant_conv);
  EXPECT_TRUE(c.mid_block_add_attention);
  EXPECT_EQ(c.vae_scale_factor(), 1);
}

TEST(VaeConfig, ParsesTinyFluxConfig) {
  auto m = load_tiny();
  const auto& c = m->config();
  EXPECT_EQ(c.block_out_channels, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(c.norm_num_groups, 8);
  EXPECT_DOUBLE_EQ(c.scaling_factor, 0.3611);
  ASSERT_TRUE(c.shift_factor.has_value());
  EXPECT_DOUBLE_EQ(*c.shift_factor, 0.1159);
  EXPECT_FALSE(c.use_quant_conv);
  EXPECT_FALSE(c.use_post_quant_conv);
  EXPECT_EQ(c.vae_scale_factor(), 2);
  EXPECT_EQ(m->quant_conv, nullptr);
  EXPECT_EQ(m->post_quant_conv, nullptr);
}

TEST(VaeConfig, RejectsWhatIsNotImplemented) {
  auto bad = [](nlohmann::json j) {
    return AutoencoderKLConfig::from_json(io::JsonConfig(std::move(j), "vae/config.json"));
  };
  EXPECT_THROW(bad({{"down_block_types", {"AttnDownEncoderBlock2D"}}}), Error);
  EXPECT_THROW(bad({{"act_fn", "gelu"}}), Error);
  EXPECT_THROW(bad({{"block_out_channels", {64, 128}}}), Error);  // 1 block type for 2 blocks
  EXPECT_THROW(bad({{"norm_num_groups", 5}}), Error);             // 64 % 5 != 0
  EXPECT_THROW(bad({{"latent_channels", "four"}}), Error);
}

TEST(Vae, ParameterNamesAreDiffusersKeys) {
  // Quant convs and the 1x1 shortcuts appear exactly where Diffusers has them.
  AutoencoderKLConfig c;
  c.block_out_channels = {32, 64};
  c.down_block_types = {"DownEncoderBlock2D", "DownEncoderBlock2D"};
  c.up_block_types = {"UpDecoderBlock2D", "UpDecoderBlock2D"};
  c.norm_num_groups = 8;
  c.layers_per_block = 2;  // decoder blocks get 3 resnets
  AutoencoderKL m(c);
  std::vector<std::string> names;
  for (auto& [n, p] : m.named_parameters()) names.push_back(n);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("quant_conv.weight"));
  EXPECT_TRUE(has("post_quant_conv.bias"));
  EXPECT_TRUE(has("encoder.down_blocks.0.downsamplers.0.conv.weight"));
  EXPECT_FALSE(has("encoder.down_blocks.1.downsamplers.0.conv.weight"));
  EXPECT_TRUE(has("encoder.down_blocks.1.resnets.0.conv_shortcut.weight"));
  EXPECT_FALSE(has("encoder.down_blocks.0.resnets.0.conv_shortcut.weight"));
  EXPECT_TRUE(has("encoder.down_blocks.1.resnets.1.conv2.weight"));
  EXPECT_FALSE(has("encoder.down_blocks.1.resnets.2.conv2.weight"));
  EXPECT_TRUE(has("decoder.up_blocks.1.resnets.2.conv2.weight"));
  EXPECT_TRUE(has("decoder.up_blocks.1.resnets.0.conv_shortcut.weight"));
  EXPECT_TRUE(has("decoder.up_blocks.0.upsamplers.0.conv.weight"));
  EXPECT_FALSE(has("decoder.up_blocks.1.upsamplers.0.conv.weight"));
  EXPECT_TRUE(has("decoder.mid_block.attentions.0.to_out.0.weight"));
  EXPECT_TRUE(has("encoder.mid_block.attentions.0.group_norm.bias"));
  c.mid_block_add_attention = false;
  AutoencoderKL plain(c);
  for (auto& [n, p] : plain.named_parameters()) EXPECT_EQ(n.find("attentions"), std::string::npos);
}

TEST(Vae, LoadsTinyFluxStrictly) {
  auto m = load_tiny();  // strict: throws listing missing/unexpected keys
  const auto sd = io::SafetensorsFile::open(tiny_flux() / "vae" / "diffusion_pytorch_model.safetensors")
                      .tensors();
  EXPECT_EQ(m->named_parameters().size(), sd.size());
  // A pipeline folder resolves its "vae" component.
  auto via_pipeline = AutoencoderKL::from_pretrained(tiny_flux());
  EXPECT_EQ(via_pipeline->named_parameters().size(), sd.size());
}

TEST(Vae, DecodeMatchesDiffusersF32) {
  auto m = load_tiny(DType::f32);
  const Tensor z = reference().tensor("decode.in");  // [1, 4, 16, 16]
  const Tensor want = reference().tensor("decode.out");
  const Tensor got = m->decode(z);  // [1, 3, 32, 32]
  EXPECT_EQ(got.shape(), (Shape{1, 3, 32, 32}));
  const double err = max_rel(got, want);
  std::cout << "[vae] decode f32 max relative error " << err << "\n";
  EXPECT_LE(err, 1e-4);
}

TEST(Vae, EncodeMatchesDiffusersF32) {
  auto m = load_tiny(DType::f32);
  const DiagonalGaussian post = m->encode(reference().tensor("encode.in"));  // [1, 3, 32, 32]
  const double em = max_rel(post.mean, reference().tensor("encode.mean"));
  const double el = max_rel(post.logvar, reference().tensor("encode.logvar"));
  std::cout << "[vae] encode f32 max relative error mean " << em << " logvar " << el << "\n";
  EXPECT_LE(em, 1e-4);
  EXPECT_LE(el, 1e-4);
}

// bf16 weights and activations against Diffusers' own bf16 run. Both are ~1.3e-2..1.6e-2 off the fp32
// reference: every conv rounds its output to bf16, and this tiny VAE's outputs are small relative to its
// activations, so single-ulp flips anywhere are magnified (Diffusers itself, with only its mid-block linears
// computed in f32 and rounded once, which torch's bf16 linear already gives for all but ~1 element in 8192,
// moves its decode by 1.3e-2). diffq lies 1.83e-2 (decode), 6.0e-3 (mean), 9.4e-3 (logvar) from Diffusers'
// bf16 run (measured 2026-12-01); bounds 2x that. Also no further from the fp32 reference than Diffusers' bf16
// run, x1.25: measured 1.02x, 1.00x, 0.93x with OpenBLAS's f32 GEMMs, 1.16x on decode once the f32 GEMMs
// moved to diffq's blocked kernel (another accumulation order; this tiny VAE magnifies such flips).
// decoder.conv_out's weight scaled by 1.04 fails both (4.7e-2 vs Diffusers bf16).
TEST(Vae, Bf16ComputeMatchesDiffusersBf16) {
  auto m = load_tiny(DType::bf16);
  const Tensor got = m->decode(reference().tensor("decode.in").to(DType::bf16));
  EXPECT_EQ(got.dtype(), DType::bf16);
  const DiagonalGaussian post = m->encode(reference().tensor("encode.in").to(DType::bf16));
  EXPECT_EQ(post.mean.dtype(), DType::bf16);
  struct Out {
    const char* key;
    Tensor got;
    double bound;
  };
  for (const Out& o : {Out{"decode.out", got, 3.7e-2}, Out{"encode.mean", post.mean, 1.2e-2},
                       Out{"encode.logvar", post.logvar, 1.9e-2}}) {
    const Tensor want = reference_bf16().tensor(o.key), f32 = reference().tensor(o.key);
    const double e = max_rel(o.got, want), e32 = max_rel(o.got, f32), torch32 = max_rel(want, f32);
    std::cout << "[vae] bf16 " << o.key << ": max relative error vs Diffusers bf16 " << e << " (vs fp32: diffq "
              << e32 << ", Diffusers bf16 " << torch32 << ")\n";
    EXPECT_LE(e, o.bound) << o.key;
    EXPECT_LE(e32, 1.25 * torch32) << o.key;
  }
}

// The image layout (ops::ImageLayout) the VAE keeps its activations in follows the device's preference
// call by call on one model: forced channels-first, channels-last, then channels-first again
// (DIFFQ_IMAGE_LAYOUT's tuning), every Conv2d / GroupNorm of the decoder is relaid, the decode matches
// Diffusers in either layout (f32: the layouts differ only in the group norm's summation order), and
// back in channels-first it gives the first call's bits again.
TEST(Vae, DecodeFollowsTheImageLayoutCallByCall) {
  namespace cpu = diffq::backend::cpu;
  auto m = load_tiny(DType::f32);
  const Tensor z = reference().tensor("decode.in"), want = reference().tensor("decode.out");
  Tensor first;
  for (const auto choice : {cpu::ImageLayoutChoice::channels_first, cpu::ImageLayoutChoice::channels_last,
                            cpu::ImageLayoutChoice::channels_first}) {
    cpu::Tuning t = cpu::current_tuning();
    t.image_layout = choice;
    const cpu::ScopedTuning scope(t);
    const Tensor got = m->decode(z);
    const auto layout = choice == cpu::ImageLayoutChoice::channels_last ? ops::ImageLayout::channels_last
                                                                         : ops::ImageLayout::channels_first;
    EXPECT_EQ(m->decoder.conv_in.layout, layout);
    EXPECT_EQ(m->decoder.conv_out.layout, layout);
    EXPECT_EQ(m->decoder.up_blocks[0].resnets[0].norm1.layout, layout);
    EXPECT_EQ(m->decoder.mid_block.attentions[0].group_norm.layout, layout);
    EXPECT_LE(max_rel(got, want), 1e-4);
    if (!first.defined()) {
      first = got;
    } else if (layout == ops::ImageLayout::channels_first) {
      EXPECT_EQ(max_rel(got, first), 0.0) << "back in channels-first";
    } else {
      EXPECT_LE(max_rel(got, first), 1e-5) << "channels-last vs channels-first";
    }
  }
}

TEST(Vae, LogvarIsClampedAndShapesAreChecked) {
  // Scaling conv_out's weights makes the raw log-variance leave [-30, 20]; Diffusers clamps it.
  auto m = load_tiny(DType::f32);
  Tensor x = reference().tensor("encode.in");
  const auto raw = m->encode(x);
  Tensor w = m->encoder.conv_out.weight.dense();
  m->encoder.conv_out.weight.set(ops::mul_scalar(w, 1e4), Residency::host);
  m->encoder.conv_out.bias.set(ops::mul_scalar(m->encoder.conv_out.bias.dense(), 1e4),
                               Residency::host);
  const auto big = m->encode(x).logvar;
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < big.numel(); ++i) {
    lo = std::min(lo, big.data<float>()[i]);
    hi = std::max(hi, big.data<float>()[i]);
  }
  EXPECT_GE(lo, -30.f);
  EXPECT_LE(hi, 20.f);
  EXPECT_TRUE(lo == -30.f || hi == 20.f) << "the scaled logvar should hit a clamp bound";
  EXPECT_EQ(raw.mean.shape(), (Shape{1, 4, 16, 16}));
  EXPECT_THROW(m->decode(Tensor::zeros({1, 3, 8, 8}, DType::f32)), Error);
  EXPECT_THROW(m->encode(Tensor::zeros({1, 4, 8, 8}, DType::f32)), Error);
}

// Not a test: the allocator's peak while decoding a 256x256 latent ([1, 4, 256, 256] -> 512x512
// image) with the tiny config. Run with --gtest_also_run_disabled_tests --gtest_filter=*Peak*.
TEST(Vae, DISABLED_DecodePeakMemory) {
  auto m = load_tiny(DType::f32);
  for (int64_t side : {64, 128, 256}) {
    const Tensor z = Tensor::zeros({1, 4, side, side}, DType::f32);
    reset_peak_memory_stats(Device::cpu());
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    Tensor img = m->decode(z);
    const int64_t peak = memory_stats(Device::cpu()).peak_bytes - before;
    const double largest = 32.0 * 4 * side * side * 4;  // [1, 32, 2h, 2w] f32
    std::cout << "[vae] decode latent " << side << "x" << side << ": peak " << peak / 1048576.0
              << " MiB above inputs, largest activation " << largest / 1048576.0 << " MiB, output "
              << img.nbytes() / 1048576.0 << " MiB\n";
  }
}
