// include/diffq/pipeline.h: DiffusionPipeline over FluxPipeline and WanPipeline. Each adapter maps the
// family-neutral GenerateParams onto its pipeline's call options and fills the pipeline's own defaults.
#include "diffq/pipeline.h"

#include "compile/compile_options.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/video_writer.h"
#include "offload/offload_spec.h"
#include "offload/planner.h"
#include "compile/compiled_module.h"
#include "pipelines/compile_report.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/wan_pipeline.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "pipeline";

std::optional<PipelineQuantizationConfig> parse_quant(const std::string& json) {
  if (json.empty()) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    fail(kCtx, "quantization_config_json is not valid JSON: ", e.what());
  }
  return PipelineQuantizationConfig::from_json(j, "quantization_config_json");
}

compile::CompileOptions compile_options(const std::string& mode, bool autotune) {
  check(mode == "full" || mode == "regional", kCtx, "compile mode must be \"full\" or \"regional\", got \"", mode, "\"");
  compile::CompileOptions o;
  if (autotune) o.mode = compile::CompileMode::max_autotune;
  return o;
}

template <class T>
T value_or(const std::optional<T>& v, T d) {
  return v ? *v : d;
}

// The fields every pipeline output has, and the call as asked (the adapters fill in what they resolved).
template <class Out>
GenerateResult result_of(const Out& out, const GenerateParams& in) {
  GenerateResult r;
  r.latents = out.latents;
  r.steps_run = out.steps_run;
  r.interrupted = out.interrupted;
  r.encode_prompt_s = out.encode_prompt_s;
  r.denoise_s = out.denoise_s;
  r.decode_s = out.decode_s;
  r.used = in;
  return r;
}

// What FLUX and Wan share: offloading (by spec or by memory budget) over the pipeline's components in its
// model_cpu_offload_seq order, and the compile report over its transformers' compiled modules.
class AdapterBase : public DiffusionPipeline {
 public:
  std::string enable_offload(const std::string& spec, bool drop_page_cache) override {
    auto sp = offload::parse_offload_spec(spec);
    sp.drop_page_cache = drop_page_cache;
    offload::apply(offloader(), components(), offload_seq(), sp);
    return sp.str();
  }
  std::string enable_memory_budget(const std::string& max_memory, const std::string& max_host_memory) override {
    offload::MemoryBudget b;
    b.max_memory = offload::parse_size(max_memory);
    if (!max_host_memory.empty()) b.max_host_memory = offload::parse_size(max_host_memory);
    const auto plan = offload::plan_memory(offload::measure_footprints(components()), b);
    offload::apply(offloader(), components(), offload_seq(), plan.spec);
    return plan.str();
  }
  CompileReport compile_report() const override { return make_compile_report(compiled_modules(), autotuned_); }

  void compile(const std::string& mode, bool autotune) override {
    compile_mode_ = mode;
    autotuned_ = autotune;
    // A step cache decides inside the block loop: a full graph cannot hold that, so compile regionally
    // (in Diffusers, the cache hooks' torch.compiler.disable would break a fullgraph compile).
    apply_compile(cache_.method != CacheOptions::Method::none && mode == "full" ? "regional" : mode, autotune);
  }
  void enable_cache(const CacheOptions& opt) override {
    cache_ = opt;
    apply_cache(opt);
    if (opt.method != CacheOptions::Method::none && compile_mode_ == "full") apply_compile("regional", autotuned_);
  }
  void disable_cache() override {
    cache_ = CacheOptions{};
    apply_cache(cache_);
    if (compile_mode_ == "full") apply_compile("full", autotuned_);
  }

 protected:
  virtual void apply_compile(const std::string& mode, bool autotune) = 0;
  virtual void apply_cache(const CacheOptions& opt) = 0;
  void finish_report(CacheReport& r) const {
    if (cache_.method != CacheOptions::Method::none && compile_mode_ == "full")
      r.note = "compile full was applied as regional: the cache decides inside the block loop";
    if (cache_.method == CacheOptions::Method::taylorseer && !compile_mode_.empty())
      r.note = "TaylorSeer replaces attention outputs inside each block: the blocks ran eagerly (not compiled)";
  }
  CacheOptions cache_;
  std::string compile_mode_;
  virtual offload::PipelineOffloader& offloader() = 0;
  virtual offload::NamedModules components() const = 0;
  virtual const char* offload_seq() const = 0;
  virtual std::vector<const compile::CompiledModule*> compiled_modules() const = 0;
  bool autotuned_ = false;
};

class FluxAdapter final : public AdapterBase {
 public:
  explicit FluxAdapter(std::unique_ptr<FluxPipeline> p) : p_(std::move(p)) {}
  std::string class_name() const override { return "FluxPipeline"; }
  bool generates_video() const override { return false; }
  GenerateParams defaults() const override {
    GenerateParams d;
    d.width = d.height = 128 * p_->vae_scale_factor();
    d.num_inference_steps = 28;
    d.guidance_scale = 3.5;
    d.true_cfg_scale = 1.0;
    d.max_sequence_length = 512;
    return d;
  }
  GenerateResult generate(const GenerateParams& in) override {
    const GenerateParams d = defaults();
    FluxCallOptions o;
    o.prompt = {in.prompt};
    if (!in.prompt_2.empty()) o.prompt_2 = {in.prompt_2};
    if (!in.negative_prompt.empty()) o.negative_prompt = {in.negative_prompt};
    if (!in.negative_prompt_2.empty()) o.negative_prompt_2 = {in.negative_prompt_2};
    check(in.num_frames == 0 || in.num_frames == 1, kCtx, "FluxPipeline makes images: num_frames must be 0 or 1, got ",
          in.num_frames);
    check(!in.guidance_scale_2, kCtx, "guidance_scale_2 is a Wan2.2 parameter; FluxPipeline has none");
    o.num_images_per_prompt = in.num_outputs;
    o.max_sequence_length = in.max_sequence_length > 0 ? in.max_sequence_length : d.max_sequence_length;
    o.true_cfg_scale = value_or(in.true_cfg_scale, 1.0);
    o.height = in.height > 0 ? in.height : d.height;
    o.width = in.width > 0 ? in.width : d.width;
    o.num_inference_steps = in.num_inference_steps > 0 ? in.num_inference_steps : d.num_inference_steps;
    if (!in.sigmas.empty()) o.sigmas = in.sigmas;
    o.guidance_scale = value_or(in.guidance_scale, *d.guidance_scale);
    o.seed = in.seed;
    o.latents = in.latents;
    o.output_type = in.output_latents_only ? "latent" : "image";
    o.callback = in.on_step;
    FluxOutput out = (*p_)(o);
    GenerateResult r = result_of(out, in);
    r.cache = out.cache;
    finish_report(r.cache);
    r.images_u8 = out.image_u8;
    r.pixels_f32 = out.image_f32;
    r.used.width = o.width;
    r.used.height = o.height;
    r.used.num_inference_steps = in.sigmas.empty() ? o.num_inference_steps : int64_t(in.sigmas.size());
    r.used.guidance_scale = o.guidance_scale;
    r.used.true_cfg_scale = o.true_cfg_scale;
    r.used.max_sequence_length = o.max_sequence_length;
    return r;
  }
  void apply_compile(const std::string& mode, bool autotune) override {
    const auto o = compile_options(mode, autotune);
    if (mode == "full") p_->transformer->compile(o);
    else p_->transformer->compile_repeated_blocks(o);
  }
  void apply_cache(const CacheOptions& opt) override { p_->transformer->enable_cache(opt, "transformer"); }
  std::map<std::string, std::string> quantization() const override { return p_->quantization; }

 protected:
  offload::PipelineOffloader& offloader() override { return p_->offloader; }
  offload::NamedModules components() const override { return p_->offload_components(); }
  const char* offload_seq() const override { return FluxPipeline::model_cpu_offload_seq; }
  std::vector<const compile::CompiledModule*> compiled_modules() const override {
    return p_->transformer->compiled_modules();
  }

 private:
  std::unique_ptr<FluxPipeline> p_;
};

class WanAdapter final : public AdapterBase {
 public:
  explicit WanAdapter(std::unique_ptr<WanPipeline> p) : p_(std::move(p)) {}
  std::string class_name() const override { return "WanPipeline"; }
  bool generates_video() const override { return true; }
  GenerateParams defaults() const override {
    GenerateParams d;  // WanPipeline.__call__'s defaults
    d.height = 480;
    d.width = 832;
    d.num_frames = 81;
    d.num_inference_steps = 50;
    d.guidance_scale = 5.0;
    d.max_sequence_length = 512;
    return d;
  }
  GenerateResult generate(const GenerateParams& in) override {
    const GenerateParams d = defaults();
    check(in.prompt_2.empty() && in.negative_prompt_2.empty(), kCtx,
          "prompt_2 / negative_prompt_2 are FLUX parameters; WanPipeline has one text encoder");
    check(!in.true_cfg_scale, kCtx, "true_cfg_scale is a FLUX parameter; Wan's CFG is guidance_scale (on when > 1)");
    check(in.sigmas.empty(), kCtx, "custom sigmas are not supported by WanPipeline");
    WanCallOptions o;
    o.prompt = {in.prompt};
    if (!in.negative_prompt.empty()) o.negative_prompt = {in.negative_prompt};
    o.num_videos_per_prompt = in.num_outputs;
    o.max_sequence_length = in.max_sequence_length > 0 ? in.max_sequence_length : d.max_sequence_length;
    o.height = in.height > 0 ? in.height : d.height;
    o.width = in.width > 0 ? in.width : d.width;
    o.num_frames = in.num_frames > 0 ? in.num_frames : d.num_frames;
    o.num_inference_steps = in.num_inference_steps > 0 ? in.num_inference_steps : d.num_inference_steps;
    o.guidance_scale = value_or(in.guidance_scale, *d.guidance_scale);
    o.guidance_scale_2 = in.guidance_scale_2;
    o.seed = in.seed;
    o.latents = in.latents;
    o.output_type = in.output_latents_only ? "latent" : "np";
    o.callback = in.on_step;
    WanOutput out = (*p_)(o);
    GenerateResult r = result_of(out, in);
    r.cache = out.cache;
    finish_report(r.cache);
    r.videos_u8 = out.frames_u8;
    r.pixels_f32 = out.frames_f32;
    r.used.width = out.width;
    r.used.height = out.height;
    r.used.num_frames = out.num_frames;
    r.used.num_inference_steps = o.num_inference_steps;
    r.used.guidance_scale = o.guidance_scale;
    if (p_->boundary_ratio) r.used.guidance_scale_2 = o.guidance_scale_2.value_or(o.guidance_scale);
    r.used.max_sequence_length = o.max_sequence_length;
    return r;
  }
  void apply_compile(const std::string& mode, bool autotune) override {
    const auto o = compile_options(mode, autotune);
    for (auto* t : {p_->transformer.get(), p_->transformer_2.get()}) {
      if (!t) continue;
      if (mode == "full") t->compile(o);
      else t->compile_repeated_blocks(o);
    }
  }
  void apply_cache(const CacheOptions& opt) override {
    if (p_->transformer) p_->transformer->enable_cache(opt, "transformer");
    if (p_->transformer_2) p_->transformer_2->enable_cache(opt, "transformer_2");
  }
  std::map<std::string, std::string> quantization() const override { return p_->quantization; }

 protected:
  offload::PipelineOffloader& offloader() override { return p_->offloader; }
  offload::NamedModules components() const override { return p_->offload_components(); }
  const char* offload_seq() const override { return WanPipeline::model_cpu_offload_seq; }
  std::vector<const compile::CompiledModule*> compiled_modules() const override {
    std::vector<const compile::CompiledModule*> out;
    for (auto* t : {p_->transformer.get(), p_->transformer_2.get()})
      if (t)
        for (const auto* m : t->compiled_modules()) out.push_back(m);
    return out;
  }

 private:
  std::unique_ptr<WanPipeline> p_;
};
}  // namespace

std::string DiffusionPipeline::pipeline_class_of(const std::filesystem::path& folder) {
  check(std::filesystem::is_regular_file(folder / "model_index.json"), kCtx, folder.string(),
        " is not a Diffusers pipeline folder (no model_index.json)");
  return io::DiffusersFolder::open(folder).pipeline_class();
}

std::unique_ptr<DiffusionPipeline> DiffusionPipeline::from_pretrained(const std::filesystem::path& folder,
                                                                      const PipelineOptions& opt) {
  const std::string cls = pipeline_class_of(folder);
  if (cls == "FluxPipeline") {
    FluxPipelineLoadOptions lo;
    lo.load_text_encoders = opt.load_text_encoders;
    lo.transformer_file = opt.transformer_file;
    lo.quantization_config = parse_quant(opt.quantization_config_json);
    return std::make_unique<FluxAdapter>(FluxPipeline::from_pretrained(folder, opt.dtype, lo));
  }
  if (cls == "WanPipeline") {
    WanPipelineLoadOptions lo;
    lo.transformer_file = opt.transformer_file;
    lo.load_text_encoder = opt.load_text_encoders;
    lo.quantization_config = parse_quant(opt.quantization_config_json);
    return std::make_unique<WanAdapter>(WanPipeline::from_pretrained(folder, opt.dtype, lo));
  }
  fail(kCtx, (folder / "model_index.json").string(), ": _class_name \"", cls,
       "\" is not a pipeline diffq runs (FluxPipeline, WanPipeline)");
}

void save_video(const std::filesystem::path& path, const Tensor& frames_u8, const VideoOptions& opt) {
  io::VideoWriteOptions o;
  o.fps = opt.fps;
  o.metadata = opt.metadata;
  io::write_video(path, frames_u8, o);
}

void save_frames(const std::filesystem::path& dir, const Tensor& frames_u8,
                 const std::map<std::string, std::string>& metadata) {
  io::write_frames_png(dir, frames_u8, metadata);
}

void save_latents(const std::filesystem::path& path, const Tensor& latents) {
  io::save_safetensors(path, io::StateDict{{"latents", latents.contiguous()}}, std::nullopt);
}

Tensor load_latents(const std::filesystem::path& path) {
  return io::SafetensorsFile::open(path).tensor("latents").contiguous();
}

void save_image(const std::filesystem::path& path, const Tensor& image_u8,
                const std::vector<std::pair<std::string, std::string>>& metadata) {
  io::PngText t(metadata.begin(), metadata.end());
  io::write_png(path, image_u8.dim() == 3 ? image_u8.unsqueeze(0) : image_u8, t);
}

}  // namespace diffq
