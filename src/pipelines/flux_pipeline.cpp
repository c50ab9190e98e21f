#include "pipelines/flux_pipeline.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "cache/step_cache.h"
#include "core/random.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipelines/component_loading.h"
#include "quant/quant_method.h"
#include "models/flux/flux_single_file.h"
#include "offload/offload_hook.h"
#include "ops/ops.h"
#include "pipelines/flux_latents.h"
#include "pipelines/stage_clock.h"

namespace diffq {

namespace {

constexpr const char* kCtx = "flux_pipeline";

bool defined(const Tensor& t) { return t.defined(); }

// Each row repeated n times in place: r0, r0, r1, r1, ... (Diffusers' repeat(1, n, 1).view(B * n, ...)).
Tensor repeat_rows(const Tensor& t, int64_t n) { return ops::repeat_interleave(t, n, 0); }
}  // namespace

std::unique_ptr<FluxPipeline> FluxPipeline::from_pretrained(const std::filesystem::path& folder,
                                                            std::optional<DType> dtype,
                                                            const FluxPipelineLoadOptions& opt) {
  auto f = io::DiffusersFolder::open(folder);
  auto p = std::make_unique<FluxPipeline>();
  for (const char* name : {"vae", "scheduler"})
    check(f.has_component(name), kCtx, folder.string(), ": model_index.json has no ", name, " component");
  check(f.has_component("transformer") || !opt.transformer_file.empty(), kCtx, folder.string(),
        ": model_index.json has no transformer component (pass a single-file transformer)");

  // Quantization hooks per component: pre-quantized files first, else the pipeline config.
  ComponentLoader loader(f, dtype, opt.quantization_config, opt.convert_pre_quantized);
  auto hooks_for = [&](const std::string& name) {
    return loader.hooks_for(name, !(name == "transformer" && !opt.transformer_file.empty()));
  };

  LoadOptions lo = hooks_for("transformer");
  if (f.has_component("transformer")) {
    const auto& tc = f.component("transformer");
    check(tc.class_name == "FluxTransformer2DModel", kCtx, folder.string(), ": transformer is a ", tc.class_name,
          ", not a FluxTransformer2DModel");
  }
  if (!opt.transformer_file.empty()) {
    models::flux::FluxTransformerConfig base;
    if (f.has_component("transformer"))
      base = models::flux::FluxTransformerConfig::from_json(f.component("transformer").config);
    lo.source = opt.transformer_file.string();
    p->transformer = models::flux::load_flux_single_file(opt.transformer_file, base, lo);
    p->transformer_file = opt.transformer_file;
    loader.finish("transformer", *p->transformer);
    // A pre-quantized single file (GGUF) carries its own schemes: label them for --json/bench.
    if (!loader.quantization.count("transformer"))
      if (std::string schemes = quantized_schemes_summary(*p->transformer); !schemes.empty())
        loader.quantization["transformer"] = schemes + " (pre-quantized, " + opt.transformer_file.filename().string() + ")";
  } else {
    const auto& tc = f.component("transformer");
    lo.source = tc.dir.string();
    p->transformer = models::flux::FluxTransformer2DModel::from_pretrained(tc.dir, lo);
    loader.finish("transformer", *p->transformer);
  }

  const auto& vc = f.component("vae");
  LoadOptions vo = hooks_for("vae");
  vo.source = vc.dir.string();
  p->vae = vae::AutoencoderKL::from_pretrained(vc.dir, vo);
  loader.finish("vae", *p->vae);

  const auto& sc = f.component("scheduler");
  check(sc.class_name == "FlowMatchEulerDiscreteScheduler", kCtx, folder.string(), ": scheduler is a ",
        sc.class_name, ", not a FlowMatchEulerDiscreteScheduler");
  p->scheduler = std::make_unique<FlowMatchEulerDiscreteScheduler>(FlowMatchEulerDiscreteConfig::from_json(sc.config));

  if (opt.load_text_encoders) {
    if (f.has_component("text_encoder")) {
      p->text_encoder = clip::CLIPTextModel::from_pretrained(f, "text_encoder", dtype, hooks_for("text_encoder"));
      loader.finish("text_encoder", *p->text_encoder);
    }
    if (f.has_component("text_encoder_2")) {
      p->text_encoder_2 = t5::T5EncoderModel::from_pretrained(f, "text_encoder_2", dtype, hooks_for("text_encoder_2"));
      loader.finish("text_encoder_2", *p->text_encoder_2, t5::T5EncoderModel::keep_in_fp32_modules(dtype));
    }
    if (f.has_component("tokenizer"))
      p->tokenizer = std::make_unique<tokenizers::CLIPTokenizer>(
          tokenizers::CLIPTokenizer::from_pretrained(f.component("tokenizer").dir));
    if (f.has_component("tokenizer_2"))
      p->tokenizer_2 = std::make_unique<tokenizers::T5Tokenizer>(
          tokenizers::T5Tokenizer::from_pretrained(f.component("tokenizer_2").dir));
  }
  p->quantization = loader.quantization;
  p->quant_methods = loader.quant_methods;
  p->converted_from = loader.converted_from;
  check(p->transformer->config.in_channels % 4 == 0 &&
            p->transformer->config.in_channels / 4 == p->vae->config().latent_channels,
        kCtx, folder.string(), ": transformer in_channels ", p->transformer->config.in_channels,
        " is not 4 x the VAE's latent_channels ", p->vae->config().latent_channels);
  return p;
}

int64_t FluxPipeline::vae_scale_factor() const { return vae ? vae->config().vae_scale_factor() : 8; }

FluxPromptEmbeds FluxPipeline::encode_prompt_ids(const Tensor& clip_ids, const Tensor& t5_ids) {
  check(text_encoder && text_encoder_2, kCtx, "the text encoders are not loaded");
  check(clip_ids.dim() == 2 && t5_ids.dim() == 2 && clip_ids.shape()[0] == t5_ids.shape()[0], kCtx,
        "clip_ids [B, 77] and t5_ids [B, S] must share the batch size");
  check(t5_ids.shape()[1] <= 512, kCtx, "max_sequence_length cannot be greater than 512, got ", t5_ids.shape()[1]);
  const DType d = transformer->compute_dtype();
  FluxPromptEmbeds e;
  e.pooled_prompt_embeds = (*text_encoder)(clip_ids.to(device)).pooler_output.to(d);
  e.prompt_embeds = (*text_encoder_2)(t5_ids.to(device)).to(d);
  return e;
}

offload::NamedModules FluxPipeline::offload_components() const {
  return {{"text_encoder", text_encoder.get()}, {"text_encoder_2", text_encoder_2.get()},
          {"transformer", transformer.get()}, {"vae", vae.get()}};
}
void FluxPipeline::enable_model_cpu_offload(std::optional<Device> device, const std::filesystem::path& disk_path) {
  offloader.enable_model_cpu_offload(offload_components(), model_cpu_offload_seq, device, disk_path);
}
void FluxPipeline::enable_sequential_cpu_offload(std::optional<Device> device, const std::filesystem::path& disk_path) {
  offloader.enable_sequential_cpu_offload(offload_components(), device, disk_path);
}
void FluxPipeline::enable_group_offload(const offload::GroupOffloadOptions& o, const std::vector<std::string>& exclude) {
  offloader.enable_group_offload(offload_components(), o, exclude);
}

FluxOutput FluxPipeline::operator()(const FluxCallOptions& opt) {
  // Diffusers' maybe_free_model_hooks at the end of __call__ (model CPU offload sends everything home).
  struct FreeHooksAtEnd {
    FluxPipeline* p;
    ~FreeHooksAtEnd() {
      p->transformer->clear_rope_cache();  // the generation's RoPE tables: memory back to the idle level
      p->transformer->clear_step_plan();   // and its steps' modulation
      try {
        p->maybe_free_model_hooks();
      } catch (...) {
      }
    }
  } free_hooks_at_end{this};
  const auto& tcfg = transformer->config;
  // ---- check_inputs + encode_prompt ----
  StageClock clock;
  FluxCallOptions o = opt;
  check(o.num_images_per_prompt >= 1, kCtx, "num_images_per_prompt must be >= 1, got ", o.num_images_per_prompt);
  check(o.max_sequence_length > 0 && o.max_sequence_length <= 512, kCtx,
        "max_sequence_length cannot be greater than 512 (nor below 1), got ", o.max_sequence_length);
  if (!o.prompt.empty()) {
    check(!defined(o.prompt_embeds) && !defined(o.pooled_prompt_embeds), kCtx,
          "pass either prompt or prompt_embeds, not both");
    const int64_t n = o.num_images_per_prompt;
    FluxPromptEmbeds pos = encode_prompt(o.prompt, o.prompt_2, o.max_sequence_length);
    o.prompt_embeds = repeat_rows(pos.prompt_embeds, n);
    o.pooled_prompt_embeds = repeat_rows(pos.pooled_prompt_embeds, n);
    if (o.true_cfg_scale > 1.0 && !o.negative_prompt.empty()) {
      check(!defined(o.negative_prompt_embeds), kCtx, "pass either negative_prompt or negative_prompt_embeds, not both");
      auto widen = [&](std::vector<std::string> v, const char* what) {
        check(v.empty() || v.size() == 1 || v.size() == o.prompt.size(), kCtx, what, " has ", v.size(),
              " entries; give 1 or one per prompt (", o.prompt.size(), ")");
        if (v.size() == 1) v.assign(o.prompt.size(), v[0]);
        return v;
      };
      FluxPromptEmbeds neg = encode_prompt(widen(o.negative_prompt, "negative_prompt"),
                                           widen(o.negative_prompt_2, "negative_prompt_2"), o.max_sequence_length);
      o.negative_prompt_embeds = repeat_rows(neg.prompt_embeds, n);
      o.negative_pooled_prompt_embeds = repeat_rows(neg.pooled_prompt_embeds, n);
    }
  } else {
    check(o.prompt_2.empty() && o.negative_prompt.empty() && o.negative_prompt_2.empty(), kCtx,
          "prompt_2 / negative_prompt need a text prompt");
  }
  check(defined(o.prompt_embeds) && defined(o.pooled_prompt_embeds), kCtx,
        "a prompt, or prompt_embeds and pooled_prompt_embeds, are required");
  // Everything the transformer sees lives on the execution device (given embeddings may come from the host).
  o.prompt_embeds = o.prompt_embeds.to(device);
  o.pooled_prompt_embeds = o.pooled_prompt_embeds.to(device);
  if (defined(o.negative_prompt_embeds)) o.negative_prompt_embeds = o.negative_prompt_embeds.to(device);
  if (defined(o.negative_pooled_prompt_embeds))
    o.negative_pooled_prompt_embeds = o.negative_pooled_prompt_embeds.to(device);
  check(o.prompt_embeds.dim() == 3 && o.prompt_embeds.shape()[2] == tcfg.joint_attention_dim, kCtx,
        "prompt_embeds must be [B, T, ", tcfg.joint_attention_dim, "]");
  const int64_t B = o.prompt_embeds.shape()[0], T = o.prompt_embeds.shape()[1];
  check(T <= 512, kCtx, "max_sequence_length cannot be greater than 512, got ", T);
  check(o.pooled_prompt_embeds.dim() == 2 && o.pooled_prompt_embeds.shape()[0] == B &&
            o.pooled_prompt_embeds.shape()[1] == tcfg.pooled_projection_dim,
        kCtx, "pooled_prompt_embeds must be [", B, ", ", tcfg.pooled_projection_dim, "]");
  check(o.height > 0 && o.width > 0, kCtx, "height and width must be positive, got ", o.height, "x", o.width);
  if (o.sigmas) {
    check(!o.sigmas->empty(), kCtx, "sigmas must not be empty");
    for (size_t i = 0; i < o.sigmas->size(); ++i)
      check(std::isfinite((*o.sigmas)[i]), kCtx, "sigmas[", i, "] is not finite: ", (*o.sigmas)[i]);
  } else {
    check(o.num_inference_steps > 0, kCtx, "num_inference_steps must be positive, got ", o.num_inference_steps);
  }
  check(o.output_type == "image" || o.output_type == "latent", kCtx, "output_type must be \"image\" or \"latent\", got \"",
        o.output_type, "\"");
  const int64_t vsf = vae_scale_factor(), mult = vsf * 2;
  check(o.height >= mult && o.width >= mult, kCtx, "height and width must be at least ", mult, ", got ", o.height,
        "x", o.width);
  auto down = [&](int64_t v) { return v / mult * mult; };
  check(o.height % mult == 0 && o.width % mult == 0, kCtx, "height and width must be multiples of ", mult,
        " (the VAE scale factor x 2), got ", o.width, "x", o.height, "; the nearest valid sizes are ", down(o.width),
        "x", down(o.height), " or ", down(o.width + mult - 1), "x", down(o.height + mult - 1));
  check(o.output_type == "latent" || vae, kCtx, "output_type \"image\" needs a VAE; this pipeline has none");
  const bool has_neg = defined(o.negative_prompt_embeds) && defined(o.negative_pooled_prompt_embeds);
  check(defined(o.negative_prompt_embeds) == defined(o.negative_pooled_prompt_embeds), kCtx,
        "negative_prompt_embeds and negative_pooled_prompt_embeds go together");
  const bool do_true_cfg = o.true_cfg_scale > 1.0 && has_neg;
  if (do_true_cfg) {
    check(o.negative_prompt_embeds.dim() == 3 && o.negative_prompt_embeds.shape()[0] == B &&
              o.negative_prompt_embeds.shape()[2] == tcfg.joint_attention_dim,
          kCtx, "negative_prompt_embeds must be [", B, ", T', ", tcfg.joint_attention_dim, "]");
    check(o.negative_pooled_prompt_embeds.shape() == o.pooled_prompt_embeds.shape(), kCtx,
          "negative_pooled_prompt_embeds must have pooled_prompt_embeds' shape");
  }

  const double encode_prompt_s = clock.lap();
  // ---- latents ----
  const DType ldt = o.prompt_embeds.dtype();
  const auto grid = flux::latent_grid(o.height, o.width, vsf);
  const int64_t C = num_channels_latents();
  Tensor latents;
  if (defined(o.latents)) {
    check(o.latents.shape() == Shape{B, grid.seq_len(), C * 4}, kCtx, "latents must be packed [", B, ", ",
          grid.seq_len(), ", ", C * 4, "]");
    latents = o.latents.to(ldt).contiguous().to(device);
  } else {
    Generator gen(o.seed);  // torch.Generator("cpu"): the noise is drawn on the host, then uploaded
    latents = flux::pack_latents(randn_tensor({B, C, grid.h, grid.w}, gen, ldt)).to(device);
  }
  const Tensor img_ids = flux::prepare_latent_image_ids(grid.h / 2, grid.w / 2, ldt).to(device);
  const Tensor txt_ids = flux::prepare_text_ids(T, ldt).to(device);
  Tensor neg_txt_ids;
  if (do_true_cfg) neg_txt_ids = flux::prepare_text_ids(o.negative_prompt_embeds.shape()[1], ldt).to(device);

  // ---- timesteps ----
  const auto& sc = scheduler->config();
  const double mu = calculate_shift(grid.seq_len(), sc.base_image_seq_len, sc.max_image_seq_len, sc.base_shift,
                                    sc.max_shift);
  SetTimestepsOptions st;
  st.sigmas = o.sigmas ? *o.sigmas : flux_default_sigmas(o.num_inference_steps);
  st.mu = mu;
  scheduler->set_timesteps(o.sigmas ? std::nullopt : std::optional<int64_t>(o.num_inference_steps), st);
  const std::vector<float> timesteps = scheduler->timesteps();
  const int64_t N = int64_t(timesteps.size());

  Tensor guidance;
  if (tcfg.guidance_embeds) guidance = Tensor::full({B}, o.guidance_scale, DType::f32).to(device);

  // ---- denoising loop ----
  scheduler->set_begin_index(0);
  FluxOutput out;
  out.encode_prompt_s = encode_prompt_s;
  // Step cache: a fresh state per call (Diffusers resets its stateful hooks at the end of each call).
  cache::StepCache* step_cache = transformer->step_cache();
  if (step_cache) step_cache->reset(N);
  // Each step's timestep: t.expand(B).to(latents.dtype) / 1000, computed in latents' dtype. Told to the
  // transformer first, so that its norms' modulation linears run once for many steps (the same values);
  // not under group offloading, whose prefetch replays the first pass's module calls in every later pass.
  std::vector<Tensor> step_timesteps;
  for (const float t : timesteps) {
    const float t_rounded = Tensor::full({1}, double(t), ldt).to_f32_vector()[0];
    step_timesteps.push_back(
        Tensor::from_vector(std::vector<float>(size_t(B), t_rounded / 1000.0f), {B}, ldt).to(device));
  }
  if (offload::active_offload(*transformer) != offload::OffloadKind::group) transformer->plan_steps(step_timesteps);
  for (int64_t i = 0; i < N; ++i) {
    const float t = timesteps[size_t(i)];
    const Tensor& timestep = step_timesteps[size_t(i)];
    if (step_cache) step_cache->set_context("cond");  // transformer.cache_context("cond")
    Tensor v = (*transformer)(latents, o.prompt_embeds, o.pooled_prompt_embeds, timestep, guidance, txt_ids,
                              img_ids);
    if (do_true_cfg) {
      if (step_cache) step_cache->set_context("uncond");
      Tensor vn = (*transformer)(latents, o.negative_prompt_embeds, o.negative_pooled_prompt_embeds, timestep,
                                 guidance, neg_txt_ids, img_ids);
      v = ops::add(vn, ops::mul_scalar(ops::sub(v, vn), o.true_cfg_scale));
    }
    Tensor next = scheduler->step(v, t, latents);
    if (o.step_observer) o.step_observer(FluxStepTensors{i, latents, timestep, v, next});
    latents = next;
    ++out.steps_run;
    if (o.callback && !o.callback(i, N, t)) {
      out.interrupted = true;
      break;
    }
  }
  out.latents = latents;
  out.denoise_s = clock.lap();
  if (step_cache) step_cache->append_report(out.cache);
  if (o.output_type == "latent") return out;

  // ---- decode ----
  const auto& vcfg = vae->config();
  Tensor z = flux::unpack_latents(latents, o.height, o.width, vsf);
  z = flux::scale_latents_for_vae(z, vcfg.scaling_factor, vcfg.shift_factor.value_or(0.0));
  Tensor image = vae->decode(z).to(Device::cpu());  // the one copy back to the host
  out.image_f32 = io::denormalize_image(image);
  out.image_u8 = io::image_to_uint8(out.image_f32);
  out.decode_s = clock.lap();
  return out;
}

}  // namespace diffq
