// Compiled == eager (fp32, max relative error <= 1e-5) for the tiny FLUX fixture's transformer (full
// and regional compile), T5 and CLIP text encoders and the VAE decoder, with every pass on and with
// each pass off in turn; the compiled transformer also against Diffusers' output of the fixture.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "compile/compiled_module.h"
#include "compile_test_util.h"
#include "io/diffusers_folder.h"
#include "io/safetensors.h"
#include "models/clip/clip_text_model.h"
#include "models/flux/flux_transformer.h"
#include "models/t5/t5_encoder.h"
#include "models/vae/autoencoder_kl.h"
#include "modules/quantize_on_load.h"
#include "quant/quant_method.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using compile_test::pass_settings;
using models::flux::FluxTransformer2DModel;

namespace {

const std::filesystem::path kDev = std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux";

struct FluxCase {
  std::unique_ptr<FluxTransformer2DModel> model;
  io::SafetensorsFile ref = io::SafetensorsFile::open(kDev / "reference/transformer_forward.safetensors");
  Tensor run() {
    return (*model)(ref.tensor("in.hidden_states"), ref.tensor("in.encoder_hidden_states"),
                    ref.tensor("in.pooled_projections"), ref.tensor("in.timestep"), ref.tensor("in.guidance"),
                    ref.tensor("in.txt_ids"), ref.tensor("in.img_ids"));
  }
};

FluxCase& flux() {
  static FluxCase c{FluxTransformer2DModel::from_pretrained(kDev / "transformer")};
  return c;
}

const io::DiffusersFolder& folder() {
  static const io::DiffusersFolder f = io::DiffusersFolder::open(kDev);
  return f;
}
const io::SafetensorsFile& encoders_ref() {
  static const io::SafetensorsFile f = io::SafetensorsFile::open(kDev / "reference/text_encoders.safetensors");
  return f;
}

}  // namespace

TEST(CompileModels, FluxTransformerFullCompileEqualsEager) {
  FluxCase& c = flux();
  c.model->uncompile();
  const Tensor eager = c.run();
  const Tensor diffusers = c.ref.tensor("out");
  for (const auto& [name, o] : pass_settings()) {
    c.model->compile(o);
    const Tensor got = c.run();
    EXPECT_LE(max_rel(got, eager), 1e-5) << name;
    EXPECT_LE(max_rel(got, diffusers), 1e-4) << name;
    const Tensor again = c.run();
    EXPECT_LE(max_rel(again, eager), 1e-5) << name << " (cached)";
    const auto mods = c.model->compiled_modules();
    ASSERT_EQ(mods.size(), 1u);
    EXPECT_EQ(mods[0]->stats().captures, 1) << name;
    EXPECT_EQ(mods[0]->stats().hits, 1) << name;
    EXPECT_EQ(mods[0]->stats().eager_fallbacks, 0) << name;
    const CompileStats st = mods[0]->stats();
    if (name == "all-on") {  // the passes really did something on this graph
      EXPECT_GT(st.last_passes.fused_nodes, 0);
      EXPECT_GT(st.last_passes.cse_merged, 0);
      EXPECT_GT(st.last_passes.fused_norms, 0);  // LayerNorm + modulate
      EXPECT_GT(st.last_passes.fused_epilogues, 0);  // bias + GELU, gate * x + residual
      EXPECT_LT(st.last_arena_bytes, st.last_unplanned_bytes / 2);
      std::printf("[flux full] %lld captured nodes -> %lld (%lld fused, %lld ops folded, %lld merged, %lld dead); "
                  "%lld norms folded, %lld GEMM epilogues, %lld RMSNorm + RoPE; arena %lld of %lld bytes\n",
                  (long long)st.last_passes.captured_nodes, (long long)st.last_passes.final_nodes,
                  (long long)st.last_passes.fused_nodes, (long long)st.last_passes.fused_ops,
                  (long long)st.last_passes.cse_merged, (long long)st.last_passes.dce_removed,
                  (long long)st.last_passes.fused_norms, (long long)st.last_passes.fused_epilogues,
                  (long long)st.last_passes.fused_ropes, (long long)st.last_arena_bytes, (long long)st.last_unplanned_bytes);
    }
    if (name == "no-fuse") {  // only the GEMM epilogues (one elementwise op each) remain fused nodes
      EXPECT_EQ(st.last_passes.fused_nodes, st.last_passes.fused_epilogues);
    }
    if (name == "no-plan") {
      EXPECT_EQ(st.last_arena_bytes, 0);
    }
  }
  c.model->uncompile();
}

TEST(CompileModels, FluxTransformerRegionalCompileEqualsEager) {
  FluxCase& c = flux();
  c.model->uncompile();
  ASSERT_GE(c.model->transformer_blocks.size(), 2u);  // the fixture has repeated blocks of each kind
  ASSERT_GE(c.model->single_transformer_blocks.size(), 2u);
  const Tensor eager = c.run();
  for (const auto& [name, o] : pass_settings()) {
    c.model->compile_repeated_blocks(o);
    EXPECT_LE(max_rel(c.run(), eager), 1e-5) << name;
    const auto mods = c.model->compiled_modules();
    ASSERT_EQ(mods.size(), 2u);
    // One capture per kind of block, every other block a cache hit.
    EXPECT_EQ(mods[0]->stats().captures, 1) << name;
    EXPECT_EQ(mods[0]->stats().hits, int64_t(c.model->transformer_blocks.size()) - 1) << name;
    EXPECT_EQ(mods[1]->stats().captures, 1) << name;
    EXPECT_EQ(mods[1]->stats().hits, int64_t(c.model->single_transformer_blocks.size()) - 1) << name;
  }
  c.model->uncompile();
}

TEST(CompileModels, FluxTransformerQuantizedRegionalEqualsEager) {
  auto model = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  const auto [backend, kwargs] = quant::quant_shorthand("int8wo", "float32");
  ASSERT_GT(quantize_module(*model, *quant::make_quant_method(backend, kwargs)), 0);
  FluxCase c{std::move(model)};
  const Tensor eager = c.run();
  CompileOptions o;
  o.fullgraph = true;
  c.model->compile_repeated_blocks(o);
  EXPECT_LE(max_rel(c.run(), eager), 1e-5);
  c.model->compile(o);
  EXPECT_LE(max_rel(c.run(), eager), 1e-5);
}

TEST(CompileModels, T5EncoderEqualsEager) {
  auto m = t5::T5EncoderModel::from_pretrained(folder(), "text_encoder_2", DType::f32);
  const Tensor ids = encoders_ref().tensor("t5_input_ids");
  const Tensor eager = (*m)(ids);
  ForwardFn fn = [](Module& mod, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<t5::T5EncoderModel&>(mod).forward(in[0])};
  };
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(fn, o);
    const Tensor got = cm.run(*m, {ids})[0];
    EXPECT_LE(max_rel(got, eager), 1e-5) << name;
    EXPECT_LE(max_rel(got, encoders_ref().tensor("t5_last_hidden_state")), 1e-4) << name;
  }
}

TEST(CompileModels, ClipTextEncoderEqualsEager) {
  auto m = clip::CLIPTextModel::from_pretrained(folder(), "text_encoder", DType::f32);
  const Tensor ids = encoders_ref().tensor("clip_input_ids");
  const Tensor eager = (*m)(ids).last_hidden_state;
  // The pooled row is picked from the ids' values (eager); the hidden states are the graph.
  ForwardFn fn = [](Module& mod, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<clip::CLIPTextModel&>(mod).forward(in[0]).last_hidden_state};
  };
  for (const auto& [name, o] : pass_settings()) {
    CompileOptions lenient = o;
    lenient.fullgraph = false;
    CompiledModule cm(fn, lenient);
    cm.run(*m, {ids});
    // The whole forward reads the ids to pool: not capturable, it falls back to eager (same result).
    EXPECT_EQ(cm.stats().eager_fallbacks, 1) << name;
  }
  ForwardFn hidden = [](Module& mod, const std::vector<Tensor>& in) {
    auto& c = static_cast<clip::CLIPTextModel&>(mod);
    Tensor x = c.embeddings(in[0]);
    const Tensor mask = in[1];
    for (auto& layer : c.encoder.layers) x = (*layer)(x, mask);
    return std::vector<Tensor>{c.final_layer_norm(x)};
  };
  const int64_t S = ids.size(1);
  std::vector<float> mv(size_t(S * S));
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) mv[size_t(i * S + j)] = j <= i ? 1.f : 0.f;
  const Tensor mask = Tensor::from_vector(mv, {1, 1, S, S}, DType::boolean);  // as the model's causal mask
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(hidden, o);
    const Tensor got = cm.run(*m, {ids, mask})[0];
    EXPECT_LE(max_rel(got, eager), 1e-5) << name;
    EXPECT_LE(max_rel(got, encoders_ref().tensor("clip_last_hidden_state")), 1e-4) << name;
  }
}

TEST(CompileModels, VaeDecoderEqualsEager) {
  LoadOptions lo;
  lo.dtype = DType::f32;
  auto m = vae::AutoencoderKL::from_pretrained(kDev / "vae", lo);
  const auto ref = io::SafetensorsFile::open(kDev / "reference/vae.safetensors");
  const Tensor z = ref.tensor("decode.in");
  const Tensor eager = m->decode(z);
  ForwardFn fn = [](Module& mod, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{static_cast<vae::AutoencoderKL&>(mod).decode_forward(in[0])};
  };
  for (const auto& [name, o] : pass_settings()) {
    CompiledModule cm(fn, o);
    const Tensor got = cm.run(*m, {z})[0];
    EXPECT_LE(max_rel(got, eager), 1e-5) << name;
    EXPECT_LE(max_rel(got, ref.tensor("decode.out")), 1e-4) << name;
  }
}
