#include "pipelines/wan_pipeline.h"

#include <cmath>
#include <cstdio>

#include "cache/step_cache.h"
#include "core/random.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/png.h"
#include "ops/ops.h"
#include "models/wan/wan_single_file.h"
#include "pipelines/component_loading.h"
#include "pipelines/stage_clock.h"
#include "pipelines/wan_prompt.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "wan_pipeline";

bool defined(const Tensor& t) { return t.defined(); }

// One row per prompt repeated n times in place (Diffusers' repeat(1, n, 1).view(B * n, L, D)).
Tensor repeat_rows(const Tensor& t, int64_t n) { return n == 1 ? t : ops::repeat_interleave(t, n, 0); }

std::vector<std::string> wan_keep_in_fp32(const models::wan::WanTransformer3DModel& t) {
  return models::wan::WanTransformer3DModel::keep_in_fp32_parameters(
      t, models::wan::WanTransformer3DModel::keep_in_fp32_modules());
}

// The folder's `name` component, or `file` (a single-file checkpoint) in its place.
std::unique_ptr<models::wan::WanTransformer3DModel> load_transformer(const io::DiffusersFolder& f,
                                                                     ComponentLoader& loader,
                                                                     const std::string& name,
                                                                     const std::filesystem::path& file = {}) {
  const bool in_folder = f.has_component(name);
  if (in_folder) {
    const auto& c = f.component(name);
    check(c.class_name == "WanTransformer3DModel", kCtx, f.root().string(), ": ", name, " is a ", c.class_name,
          ", not a WanTransformer3DModel");
  }
  if (!file.empty()) {
    LoadOptions lo = loader.hooks_for(name, /*from_folder=*/false);
    lo.source = file.string();
    std::optional<models::wan::WanTransformerConfig> base;
    if (in_folder) base = models::wan::WanTransformerConfig::from_json(f.component(name).config);
    auto t = models::wan::load_wan_single_file(file, base, lo);
    loader.finish(name, *t, wan_keep_in_fp32(*t));
    if (!loader.quantization.count(name))  // a GGUF file carries its own schemes
      if (std::string schemes = quantized_schemes_summary(*t); !schemes.empty())
        loader.quantization[name] = schemes + " (pre-quantized, " + file.filename().string() + ")";
    return t;
  }
  if (!in_folder) return nullptr;
  const auto& c = f.component(name);
  LoadOptions lo = loader.hooks_for(name);
  lo.source = c.dir.string();
  auto t = models::wan::WanTransformer3DModel::from_pretrained(c.dir, lo);
  loader.finish(name, *t, wan_keep_in_fp32(*t));
  return t;
}

}  // namespace

std::unique_ptr<WanPipeline> WanPipeline::from_pretrained(const std::filesystem::path& folder,
                                                          std::optional<DType> dtype,
                                                          const WanPipelineLoadOptions& opt) {
  auto f = io::DiffusersFolder::open(folder);
  auto p = std::make_unique<WanPipeline>();
  check(f.has_component("scheduler"), kCtx, folder.string(), ": model_index.json has no scheduler component");
  check(f.has_component("transformer") || f.has_component("transformer_2") || !opt.transformer_file.empty(), kCtx,
        folder.string(), ": model_index.json has neither transformer nor transformer_2 (pass a single-file transformer)");

  const auto& s = f.settings();
  if (s.contains("boundary_ratio") && !s["boundary_ratio"].is_null()) {
    check(s["boundary_ratio"].is_number(), kCtx, folder.string(), "/model_index.json: boundary_ratio must be a number, got ",
          s["boundary_ratio"].dump());
    p->boundary_ratio = s["boundary_ratio"].get<double>();
    check(*p->boundary_ratio >= 0.0 && *p->boundary_ratio <= 1.0, kCtx, folder.string(),
          "/model_index.json: boundary_ratio must lie in [0, 1], got ", *p->boundary_ratio);
  }
  if (s.contains("expand_timesteps") && !s["expand_timesteps"].is_null()) {
    check(s["expand_timesteps"].is_boolean(), kCtx, folder.string(),
          "/model_index.json: expand_timesteps must be true or false, got ", s["expand_timesteps"].dump());
    p->expand_timesteps = s["expand_timesteps"].get<bool>();
  }

  ComponentLoader loader(f, dtype, opt.quantization_config, opt.convert_pre_quantized);
  p->transformer = load_transformer(f, loader, "transformer", opt.transformer_file);
  p->transformer_2 = load_transformer(f, loader, "transformer_2");
  if (p->boundary_ratio)
    check(p->transformer && p->transformer_2, kCtx, folder.string(),
          ": boundary_ratio is set, so the folder needs both transformer and transformer_2");
  if (p->transformer && p->transformer_2) {
    const auto &a = p->transformer->config, &b = p->transformer_2->config;
    check(a.in_channels == b.in_channels && a.out_channels == b.out_channels && a.patch_size == b.patch_size &&
              a.text_dim == b.text_dim,
          kCtx, folder.string(), ": transformer and transformer_2 disagree on in/out channels, patch size or text_dim");
  }

  if (f.has_component("vae")) {
    const auto& vc = f.component("vae");
    check(vc.class_name == "AutoencoderKLWan", kCtx, folder.string(), ": vae is a ", vc.class_name,
          ", not an AutoencoderKLWan");
    LoadOptions vo = loader.hooks_for("vae");
    vo.source = vc.dir.string();
    p->vae = vae::AutoencoderKLWan::from_pretrained(vc.dir, vo);
    loader.finish("vae", *p->vae);
    const int64_t in = p->first_transformer().config.in_channels;
    check(in == p->vae->config().z_dim, kCtx, folder.string(), ": transformer in_channels ", in,
          " differs from the VAE's z_dim ", p->vae->config().z_dim);
  }

  p->scheduler = WanScheduler::from_component(f.component("scheduler"));

  if (opt.load_text_encoder && f.has_component("text_encoder")) {
    const auto& tc = f.component("text_encoder");
    check(tc.class_name == "UMT5EncoderModel" || tc.class_name == "T5EncoderModel", kCtx, folder.string(),
          ": text_encoder is a ", tc.class_name, ", not a UMT5EncoderModel or T5EncoderModel");
    p->text_encoder = t5::T5EncoderModel::from_pretrained(f, "text_encoder", dtype, loader.hooks_for("text_encoder"));
    loader.finish("text_encoder", *p->text_encoder, t5::T5EncoderModel::keep_in_fp32_modules(dtype));
    const int64_t text_dim = p->first_transformer().config.text_dim;
    check(p->text_encoder->config.d_model == text_dim, kCtx, folder.string(), ": the text encoder's d_model ",
          p->text_encoder->config.d_model, " differs from the transformer's text_dim ", text_dim);
    check(f.has_component("tokenizer"), kCtx, folder.string(), ": model_index.json has a text_encoder but no tokenizer");
    p->tokenizer = std::make_unique<tokenizers::T5Tokenizer>(
        tokenizers::T5Tokenizer::from_pretrained(f.component("tokenizer").dir));
  }
  p->quantization = loader.quantization;
  p->quant_methods = loader.quant_methods;
  return p;
}

int64_t WanPipeline::vae_scale_factor_temporal() const { return vae ? vae->config().scale_factor_temporal : 4; }
int64_t WanPipeline::vae_scale_factor_spatial() const { return vae ? vae->config().scale_factor_spatial : 8; }
int64_t WanPipeline::size_multiple() const {
  const auto& ps = first_transformer().config.patch_size;
  check(ps[1] == ps[2], kCtx, "patch sizes with different height and width (", ps[1], ", ", ps[2],
        ") are not supported");
  return vae_scale_factor_spatial() * ps[1];
}

int64_t WanPipeline::rounded_num_frames(int64_t num_frames) const {
  check(num_frames >= 1, kCtx, "num_frames must be at least 1, got ", num_frames);
  const int64_t k = vae_scale_factor_temporal();
  return num_frames % k == 1 ? num_frames : std::max<int64_t>(num_frames / k * k + 1, 1);
}

Tensor WanPipeline::encode_prompt(const std::vector<std::string>& prompts, int64_t max_sequence_length) {
  check(text_encoder && tokenizer, kCtx, "the text encoder is not loaded");
  // Diffusers: the encoder's output in the text encoder's dtype, then cast to the transformer's.
  const DType text_dtype = text_encoder->encoder.final_layer_norm.weight.dtype();
  const Tensor e = wan_encode_prompt(*text_encoder, *tokenizer, prompts, max_sequence_length, text_dtype, 1, device);
  return e.to(first_transformer().compute_dtype());
}

offload::NamedModules WanPipeline::offload_components() const {
  return {{"text_encoder", text_encoder.get()}, {"transformer", transformer.get()},
          {"transformer_2", transformer_2.get()}, {"vae", vae.get()}};
}

WanOutput WanPipeline::operator()(const WanCallOptions& opt) {
  struct FreeHooksAtEnd {  // Diffusers' maybe_free_model_hooks at the end of __call__
    WanPipeline* p;
    ~FreeHooksAtEnd() {
      for (auto* t : {p->transformer.get(), p->transformer_2.get()})
        if (t) t->clear_rope_cache();  // the generation's RoPE tables: memory back to the idle level
      try {
        p->offloader.maybe_free_model_hooks();
      } catch (...) {
      }
    }
  } free_hooks_at_end{this};
  StageClock clock;
  WanCallOptions o = opt;
  auto& tr0 = first_transformer();
  const auto& tcfg = tr0.config;
  const DType tdt = tr0.compute_dtype();

  // ---- check_inputs ----
  check(o.num_videos_per_prompt >= 1, kCtx, "num_videos_per_prompt must be >= 1, got ", o.num_videos_per_prompt);
  check(o.max_sequence_length >= 1 && o.max_sequence_length <= 4096, kCtx,
        "max_sequence_length must be in 1..4096, got ", o.max_sequence_length);
  check(o.num_inference_steps >= 1, kCtx, "num_inference_steps must be positive, got ", o.num_inference_steps);
  check(o.output_type == "np" || o.output_type == "latent", kCtx, "output_type must be \"np\" or \"latent\", got \"",
        o.output_type, "\"");
  check(o.output_type == "latent" || vae, kCtx, "output_type \"np\" needs a VAE; this pipeline has none");
  check(!o.guidance_scale_2 || boundary_ratio, kCtx,
        "guidance_scale_2 is only supported when the pipeline's boundary_ratio is set (a Wan2.2 two-expert folder)");
  // Diffusers: sizes that are not multiples of 16 are an error (check_inputs); multiples of 16 that are not
  // multiples of the spatial factor x the patch size (32 for TI2V-5B) are floored with a warning.
  const int64_t mult = size_multiple();
  auto down = [&](int64_t v) { return std::max(v / mult * mult, mult); };
  check(o.height > 0 && o.width > 0 && o.height % 16 == 0 && o.width % 16 == 0, kCtx,
        "height and width must be positive multiples of 16, got ", o.width, "x", o.height,
        "; the nearest valid sizes are ", down(o.width), "x", down(o.height), " or ", down(o.width + mult - 1), "x",
        down(o.height + mult - 1));
  if (o.height % mult != 0 || o.width % mult != 0) {
    const int64_t h = o.height / mult * mult, w = o.width / mult * mult;
    check(h > 0 && w > 0, kCtx, "height and width must be at least ", mult,
          " (the VAE's spatial factor x the patch size), got ", o.width, "x", o.height);
    std::fprintf(stderr, "diffq: height and width must be multiples of %lld (the VAE's spatial factor x the patch size): "
                 "%lldx%lld adjusted to %lldx%lld, as Diffusers does\n", (long long)mult, (long long)o.width,
                 (long long)o.height, (long long)w, (long long)h);
    o.height = h;
    o.width = w;
  }
  const int64_t num_frames = rounded_num_frames(o.num_frames);
  if (num_frames != o.num_frames)
    std::fprintf(stderr, "diffq: num_frames - 1 must be divisible by %lld: %lld frames rounded to %lld, as Diffusers does\n",
                 (long long)vae_scale_factor_temporal(), (long long)o.num_frames, (long long)num_frames);
  const bool do_cfg = o.guidance_scale > 1.0;

  // ---- encode_prompt ----
  if (!o.prompt.empty()) {
    check(!defined(o.prompt_embeds), kCtx, "pass either prompt or prompt_embeds, not both");
    o.prompt_embeds = repeat_rows(encode_prompt(o.prompt, o.max_sequence_length), o.num_videos_per_prompt);
    if (do_cfg && !defined(o.negative_prompt_embeds)) {
      std::vector<std::string> neg = o.negative_prompt;
      if (neg.empty()) neg.assign(o.prompt.size(), "");
      if (neg.size() == 1) neg.assign(o.prompt.size(), neg[0]);
      check(neg.size() == o.prompt.size(), kCtx, "negative_prompt has ", neg.size(), " entries but prompt has ",
            o.prompt.size(), "; give 1 or one per prompt");
      o.negative_prompt_embeds = repeat_rows(encode_prompt(neg, o.max_sequence_length), o.num_videos_per_prompt);
    }
  } else {
    check(o.num_videos_per_prompt == 1, kCtx,
          "num_videos_per_prompt > 1 needs a text prompt (prompt_embeds are used as given, one video per row)");
    check(o.negative_prompt.empty() || !defined(o.negative_prompt_embeds), kCtx,
          "pass either negative_prompt or negative_prompt_embeds, not both");
    if (do_cfg && !defined(o.negative_prompt_embeds) && !o.negative_prompt.empty())
      fail(kCtx, "a negative_prompt needs a text prompt (or pass negative_prompt_embeds)");
  }
  check(defined(o.prompt_embeds), kCtx, "a prompt or prompt_embeds is required");
  check(o.prompt_embeds.dim() == 3 && o.prompt_embeds.shape()[2] == tcfg.text_dim, kCtx,
        "prompt_embeds must be [B, L, ", tcfg.text_dim, "], got ", shape_str(o.prompt_embeds.shape()));
  const int64_t B = o.prompt_embeds.shape()[0];
  Tensor cond = o.prompt_embeds.to(tdt).to(device);  // given embeddings may come from the host
  Tensor uncond;
  if (do_cfg) {
    check(defined(o.negative_prompt_embeds), kCtx,
          "guidance_scale > 1 needs negative_prompt_embeds when prompt_embeds are given");
    check(o.negative_prompt_embeds.dim() == 3 && o.negative_prompt_embeds.shape()[0] == B &&
              o.negative_prompt_embeds.shape()[2] == tcfg.text_dim,
          kCtx, "negative_prompt_embeds must be [", B, ", L, ", tcfg.text_dim, "], got ",
          shape_str(o.negative_prompt_embeds.shape()));
    uncond = o.negative_prompt_embeds.to(tdt).to(device);
  }

  const double encode_prompt_s = clock.lap();
  // ---- timesteps and latents ----
  scheduler->set_timesteps(o.num_inference_steps);
  const std::vector<double>& timesteps = scheduler->timesteps();
  const int64_t N = int64_t(timesteps.size());
  const int64_t C = tcfg.in_channels, s = vae_scale_factor_spatial();
  const Shape lshape{B, C, (num_frames - 1) / vae_scale_factor_temporal() + 1, o.height / s, o.width / s};
  Tensor latents;
  if (defined(o.latents)) {
    check(o.latents.shape() == lshape, kCtx, "latents must be ", shape_str(lshape), ", got ",
          shape_str(o.latents.shape()));
    latents = o.latents.to(DType::f32).contiguous().to(device);
  } else {
    Generator gen(o.seed);  // torch.Generator("cpu"): the noise is drawn on the host, then uploaded
    latents = randn_tensor(lshape, gen, DType::f32).to(device);
  }
  const int64_t seq_len = lshape[2] * (lshape[3] / tcfg.patch_size[1]) * (lshape[4] / tcfg.patch_size[2]);
  if (expand_timesteps) {
    // Diffusers takes the per-token timesteps from every 2nd latent row and column (mask[:, ::2, ::2], written
    // for TI2V's patch size (1, 2, 2)) and fails when that count differs from the transformer's token count
    // (one timestep broadcasts: then every token gets t, as here).
    const int64_t diffusers_tokens = lshape[2] * ((lshape[3] + 1) / 2) * ((lshape[4] + 1) / 2);
    const int64_t tokens = lshape[2] / tcfg.patch_size[0] * (lshape[3] / tcfg.patch_size[1]) * (lshape[4] / tcfg.patch_size[2]);
    check(diffusers_tokens == tokens || diffusers_tokens == 1,
          kCtx, "expand_timesteps gives ", diffusers_tokens, " per-token timesteps (every 2nd latent row and column, as "
          "Diffusers' WanPipeline, written for patch size (1, 2, 2)) but the transformer with patch_size (",
          tcfg.patch_size[0], ", ", tcfg.patch_size[1], ", ", tcfg.patch_size[2], ") makes ", tokens,
          " tokens; Diffusers fails on this shape mismatch too");
  }
  std::optional<double> boundary_t;
  if (boundary_ratio) boundary_t = *boundary_ratio * double(scheduler->num_train_timesteps());
  const double g2 = o.guidance_scale_2.value_or(o.guidance_scale);

  // ---- denoising loop ----
  WanOutput out;
  out.num_frames = num_frames;
  out.height = o.height;
  out.width = o.width;
  out.encode_prompt_s = encode_prompt_s;
  // Step caches: a fresh state per call and per transformer (Diffusers resets its hooks after each call).
  for (auto* t : {transformer.get(), transformer_2.get()})
    if (t && t->step_cache()) t->step_cache()->reset(N);
  for (int64_t i = 0; i < N; ++i) {
    const double t = timesteps[size_t(i)];
    const bool high = !boundary_t || t >= *boundary_t;
    auto& model = high ? *(transformer ? transformer : transformer_2) : *transformer_2;
    const double g = high ? o.guidance_scale : g2;
    const Tensor x = latents.to(tdt);
    // t.expand(B) in the scheduler's timestep dtype, or (expand_timesteps) t for every token, float32.
    const Tensor timestep = (expand_timesteps ? Tensor::full({B, seq_len}, t, DType::f32)
                                              : Tensor::full({B}, t, scheduler->timestep_dtype()))
                                .to(device);
    cache::StepCache* step_cache = model.step_cache();
    if (step_cache) step_cache->set_context("cond");  // current_model.cache_context("cond")
    Tensor v = model(x, timestep, cond);
    if (do_cfg) {
      if (step_cache) step_cache->set_context("uncond");
      const Tensor vu = model(x, timestep, uncond);
      v = ops::add(vu, ops::mul_scalar(ops::sub(v, vu), g));
    }
    latents = scheduler->step(v, t, latents);
    ++out.steps_run;
    if (o.latents_observer) o.latents_observer(i, latents);
    if (o.callback && !o.callback(i, N, float(t))) {
      out.interrupted = true;
      break;
    }
  }
  out.latents = latents;
  out.denoise_s = clock.lap();
  for (auto* t : {transformer.get(), transformer_2.get()})
    if (t && t->step_cache()) t->step_cache()->append_report(out.cache);
  if (o.output_type == "latent") return out;

  // ---- decode ----
  const auto& vcfg = vae->config();
  const DType vdt = vae->dtype();
  const int64_t z = vcfg.z_dim;
  check(int64_t(vcfg.latents_mean.size()) == z && int64_t(vcfg.latents_std.size()) == z, kCtx,
        "the VAE config's latents_mean / latents_std need z_dim = ", z, " values");
  std::vector<float> mean(vcfg.latents_mean.begin(), vcfg.latents_mean.end()), inv_std;
  for (double sd : vcfg.latents_std) inv_std.push_back(1.0f / float(sd));  // float32 1.0 / tensor(std)
  const Tensor mean_t = Tensor::from_vector(mean, {1, z, 1, 1, 1}, DType::f32).to(vdt).to(device);
  const Tensor inv_std_t = Tensor::from_vector(inv_std, {1, z, 1, 1, 1}, DType::f32).to(vdt).to(device);
  const Tensor zl = ops::add(ops::div(latents.to(vdt), inv_std_t), mean_t);
  const Tensor video = vae->decode(zl).to(Device::cpu());  // [B, 3, F, H, W]: the one copy back to the host
  const int64_t F = video.shape()[2], H = video.shape()[3], W = video.shape()[4];
  const Tensor frames = video.permute({0, 2, 1, 3, 4}).reshape({B * F, video.shape()[1], H, W});
  out.frames_f32 = io::denormalize_image(frames).view({B, F, H, W, video.shape()[1]});
  out.frames_u8 = io::image_to_uint8(out.frames_f32.view({B * F, H, W, video.shape()[1]})).view({B, F, H, W, video.shape()[1]});
  out.decode_s = clock.lap();
  return out;
}

}  // namespace diffq
