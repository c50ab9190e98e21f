// include/diffq/pipeline.h: DiffusionPipeline over FluxPipeline and WanPipeline. Each adapter maps the
// family-neutral GenerateParams onto its pipeline's call options and fills the pipeline's own defaults.
#include "diffq/pipeline.h"

#include <algorithm>
#include <cmath>

#include "compile/compile_options.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/image_encode.h"
#include "io/png.h"
#include "pipelines/flux_latents.h"
#include "io/safetensors.h"
#include "io/video_writer.h"
#include "offload/offload_spec.h"
#include "backend/device_interface.h"
#include "offload/planner.h"
#include "compile/compiled_module.h"
#include "modules/quantize_on_load.h"
#include "pipelines/compile_report.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/pipeline_device.h"
#include "pipelines/folder_defaults.h"
#include "pipelines/pipeline_loras.h"
#include "pipelines/public_builtin.h"
#include "pipelines/public_pipeline_access.h"
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

compile::CompileOptions compile_options(const std::string& mode, bool autotune, bool reduce_overhead) {
  check(mode == "full" || mode == "regional", kCtx, "compile mode must be \"full\" or \"regional\", got \"", mode, "\"");
  check(!(autotune && reduce_overhead), kCtx, "compile: max-autotune and reduce-overhead are two modes: pick one");
  compile::CompileOptions o;
  if (autotune) o.mode = compile::CompileMode::max_autotune;
  if (reduce_overhead) o.mode = compile::CompileMode::reduce_overhead;
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
  r.latents = out.latents.to(Device::cpu());  // handed out on the host
  r.steps_run = out.steps_run;
  r.interrupted = out.interrupted;
  r.encode_prompt_s = out.encode_prompt_s;
  r.denoise_s = out.denoise_s;
  r.decode_s = out.decode_s;
  r.used = in;
  return r;
}

// The preview of GenerateParams::on_preview: latents [C, h, w] (any float dtype) -> channels 0..2, each
// min-max scaled to uint8 [h, w, 3].
Tensor preview_rgb(const Tensor& chw) {
  const Tensor x = chw.contiguous();
  const int64_t C = x.size(0), h = x.size(1), w = x.size(2);
  const std::vector<float> v = x.to_f32_vector();
  Tensor out = Tensor::empty({h, w, 3}, DType::u8);
  uint8_t* o = out.data<uint8_t>();
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t c = std::min<int64_t>(k, C - 1);
    const float* p = v.data() + c * h * w;
    float lo = p[0], hi = p[0];
    for (int64_t i = 0; i < h * w; ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
    const float s = hi > lo ? 255.0f / (hi - lo) : 0.0f;
    for (int64_t i = 0; i < h * w; ++i) o[i * 3 + k] = uint8_t(std::lround((p[i] - lo) * s));
  }
  return out;
}

bool preview_due(const GenerateParams& in, int64_t step, int64_t total) {
  return in.on_preview && in.preview_every > 0 && ((step + 1) % in.preview_every == 0 || step + 1 == total);
}

// What FLUX and Wan share: offloading (by spec or by memory budget) over the pipeline's components in its
// model_cpu_offload_seq order, the compile report over its transformers' compiled modules, the components'
// bytes, and what checkpoint.h's functions reach through detail::PipelineAccess.
class AdapterBase : public DiffusionPipeline, public detail::PipelineAccess {
 public:
  AdapterBase(std::filesystem::path source, std::string description)
      : source_(std::move(source)), description_(std::move(description)),
        folder_defaults_(builtin_name(source_) ? FolderDefaults{} : FolderDefaults::read(source_)) {}
  ComponentBytes component_bytes(const std::string& component) const override {
    for (const auto& [name, m] : components())
      if (name == component && m) {
        const auto s = summarize_quantization(*m);
        return {int64_t(s.quantized_bytes), int64_t(s.dense_bytes)};
      }
    return {};
  }
  std::string description() const override { return description_; }
  const std::filesystem::path& source_folder() const override { return source_; }
  bool builtin() const override { return builtin_name(source_).has_value(); }

  std::string enable_offload(const std::string& spec, bool drop_page_cache) override {
    auto sp = offload::parse_offload_spec(spec);
    sp.drop_page_cache = drop_page_cache;
    offload_onto_execution_device(sp);
    offload::apply(offloader(), components(), offload_seq(), sp);
    return sp.str();
  }
  std::string enable_memory_budget(const std::string& max_memory, const std::string& max_host_memory) override {
    offload::MemoryBudget b;
    b.device = device_;
    const int64_t available = device_.is_cpu() ? -1 : backend::device_interface(device_.kind)->memory_available(device_.index);
    const offload::DeviceBudget db = offload::device_budget(max_memory, device_, available);
    b.max_memory = db.bytes;
    if (!max_host_memory.empty()) b.max_host_memory = offload::parse_size(max_host_memory);
    auto plan = offload::plan_memory(offload::measure_footprints(components()), b);
    offload_onto_execution_device(plan.spec);
    offload::apply(offloader(), components(), offload_seq(), plan.spec);
    return plan.str() + db.note;
  }
  CompileReport compile_report() const override { return make_compile_report(compiled_modules(), autotuned_); }

  // Places the pipeline on its execution device (PipelineOptions::device): checked before loading by
  // from_pretrained, the weights uploaded here once.
  void place_on(Device d) {
    device_ = d;
    set_execution_device(d);
    if (!d.is_cpu()) place_components(components(), d);  // on the cpu the weights stay where they loaded (mmap)
  }
  Device device() const override { return device_; }

  void compile(const std::string& mode, bool autotune, bool reduce_overhead) override {
    // On a device without a compile backend (compile/compile_backend.h) the fusing passes, memory planning
    // and autotune decline and the graphs run op by op through the device's kernels (compile_report says so).
    compile_mode_ = mode;
    autotuned_ = autotune;
    reduce_overhead_ = reduce_overhead;
    compile_options(mode, autotune, reduce_overhead);  // checks the combination before anything changes
    // A step cache decides inside the block loop: a full graph cannot hold that, so compile regionally
    // (in Diffusers, the cache hooks' torch.compiler.disable would break a fullgraph compile).
    apply_compile(cache_.method != CacheOptions::Method::none && mode == "full" ? "regional" : mode, autotune);
    lora_set().mark_compiled();  // adapters swap freely on layers that had one at capture; new layers are refused
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

  std::string load_lora(const std::filesystem::path& file, const std::string& name, double weight, bool lenient,
                        bool hotswap, bool load_into_transformer_2) override {
    // Adapters are read into host memory; each layer copies its A / B to the activations' dtype and device at
    // first use and keeps them there (lora_linear.cpp), and fuse_lora adds B @ A on the weight's device.
    return lora_set().load(file, name, weight, lenient, hotswap, load_into_transformer_2 ? "transformer_2" : "");
  }
  void set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights) override {
    lora_set().set_adapters(names, weights);
  }
  std::vector<std::string> fuse_lora(double scale) override { return lora_set().fuse(scale); }
  void unfuse_lora() override { lora_set().unfuse(); }
  void unload_lora(const std::string& name) override { lora_set().unload(name); }
  std::vector<LoraInfo> loras() const override { return loras_ ? loras_->infos() : std::vector<LoraInfo>{}; }
  bool lora_fused() const override { return loras_ && loras_->fused(); }

 protected:
  virtual void apply_compile(const std::string& mode, bool autotune) = 0;
  virtual void apply_cache(const CacheOptions& opt) = 0;
  virtual void set_execution_device(Device d) = 0;
  // Offloading on an accelerator (Diffusers: pipe.to("cuda") then enable_model_cpu_offload() moves the
  // weights home first): the components go back to the host and the offload hooks onload them to the
  // execution device when used.
  void offload_onto_execution_device(offload::OffloadSpec& sp) {
    if (device_.is_cpu() || sp.mode == offload::OffloadMode::none) return;
    place_components(components(), Device::cpu());
    sp.device = device_;
  }
  Device device_ = Device::cpu();
  void finish_report(CacheReport& r) const {
    if (cache_.method != CacheOptions::Method::none && compile_mode_ == "full")
      r.note = "compile full was applied as regional: the cache decides inside the block loop";
    if (cache_.method == CacheOptions::Method::taylorseer && !compile_mode_.empty())
      r.note = "TaylorSeer replaces attention outputs inside each block: the blocks ran eagerly (not compiled)";
  }
  CacheOptions cache_;
  std::string compile_mode_;
  // Where adapter files load (pipeline_loras.h), made at first use.
  virtual std::vector<PipelineLoras::Place> lora_places() const = 0;
  PipelineLoras& lora_set() {
    if (!loras_) loras_ = std::make_unique<PipelineLoras>(lora_places());
    return *loras_;
  }
  std::unique_ptr<PipelineLoras> loras_;
  virtual offload::PipelineOffloader& offloader() = 0;
  virtual offload::NamedModules components() const = 0;
  virtual const char* offload_seq() const = 0;
  virtual std::vector<const compile::CompiledModule*> compiled_modules() const = 0;
  bool autotuned_ = false;
  bool reduce_overhead_ = false;  // device graphs (compile/device_graphs.h) where the pipeline runs on a device
  std::filesystem::path source_;
  std::string description_;
  FolderDefaults folder_defaults_;  // the folder's generation_defaults.json (none for builtins)
};

class FluxAdapter final : public AdapterBase {
 public:
  FluxAdapter(std::unique_ptr<FluxPipeline> p, const std::filesystem::path& folder)
      : AdapterBase(folder, "folder: the whole FluxPipeline from the prompt to the image"), p_(std::move(p)) {}
  explicit FluxAdapter(BuiltinFlux b, const std::filesystem::path& name)
      : AdapterBase(name, std::move(b.description)), p_(std::move(b.pipe)),
        builtin_embeds_(std::move(b.prompt_embeds)), builtin_pooled_(std::move(b.pooled_prompt_embeds)) {}
  const FluxPipeline* flux_pipeline() const override { return p_.get(); }
  std::string class_name() const override { return "FluxPipeline"; }
  bool generates_video() const override { return false; }
  GenerateParams defaults() const override {
    GenerateParams d;
    d.width = d.height = 128 * p_->vae_scale_factor();
    d.num_inference_steps = 28;
    d.guidance_scale = 3.5;
    d.true_cfg_scale = 1.0;
    d.max_sequence_length = 512;
    folder_defaults_.apply_to(d);
    return d;
  }
  GenerateResult generate(const GenerateParams& in) override {
    const GenerateParams d = defaults();
    FluxCallOptions o;
    if (builtin_embeds_.defined()) {  // a builtin: random prompt embeddings, latents only
      check(in.output_latents_only, kCtx, source_.string(), " has no VAE: set output_latents_only");
      o.prompt_embeds = builtin_embeds_;
      o.pooled_prompt_embeds = builtin_pooled_;
    } else {
      o.prompt = {in.prompt};
      if (!in.prompt_2.empty()) o.prompt_2 = {in.prompt_2};
      if (!in.negative_prompt.empty()) o.negative_prompt = {in.negative_prompt};
      else if (folder_defaults_.negative_prompt) o.negative_prompt = {*folder_defaults_.negative_prompt};
      if (!in.negative_prompt_2.empty()) o.negative_prompt_2 = {in.negative_prompt_2};
    }
    check(in.num_frames == 0 || in.num_frames == 1, kCtx, "FluxPipeline makes images: num_frames must be 0 or 1, got ",
          in.num_frames);
    check(!in.guidance_scale_2, kCtx, "guidance_scale_2 is a Wan2.2 parameter; FluxPipeline has none");
    o.num_images_per_prompt = in.num_outputs;
    o.max_sequence_length = in.max_sequence_length > 0 ? in.max_sequence_length : d.max_sequence_length;
    o.true_cfg_scale = value_or(in.true_cfg_scale, *d.true_cfg_scale);
    o.height = in.height > 0 ? in.height : d.height;
    o.width = in.width > 0 ? in.width : d.width;
    o.num_inference_steps = in.num_inference_steps > 0 ? in.num_inference_steps : d.num_inference_steps;
    if (!in.sigmas.empty()) o.sigmas = in.sigmas;
    o.guidance_scale = value_or(in.guidance_scale, *d.guidance_scale);
    o.seed = in.seed;
    o.latents = in.latents;
    o.output_type = in.output_latents_only ? "latent" : "image";
    o.callback = in.on_step;
    if (in.on_preview && in.preview_every > 0) {
      const int64_t total = in.sigmas.empty() ? o.num_inference_steps : int64_t(in.sigmas.size());
      const int64_t H = o.height, W = o.width, vsf = p_->vae_scale_factor();
      o.step_observer = [&in, total, H, W, vsf](const FluxStepTensors& t) {
        if (!preview_due(in, t.step, total)) return;
        const Tensor z = flux::unpack_latents(t.latents_out, H, W, vsf);  // [B, C, H/8, W/8]
        in.on_preview(t.step, preview_rgb(z.select(0, 0)));
      };
    }
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
    const auto o = compile_options(mode, autotune, reduce_overhead_);
    if (mode == "full") p_->transformer->compile(o);
    else p_->transformer->compile_repeated_blocks(o);
  }
  void apply_cache(const CacheOptions& opt) override { p_->transformer->enable_cache(opt, "transformer"); }
  void set_execution_device(Device d) override { p_->device = d; }
  std::map<std::string, std::string> quantization() const override { return p_->quantization; }

 protected:
  offload::PipelineOffloader& offloader() override { return p_->offloader; }
  offload::NamedModules components() const override { return p_->offload_components(); }
  const char* offload_seq() const override { return FluxPipeline::model_cpu_offload_seq; }
  std::vector<PipelineLoras::Place> lora_places() const override {
    // Diffusers' FluxLoraLoaderMixin: transformer + CLIP text encoder (T5 takes no LoRA there).
    const auto& c = p_->transformer->config;
    lora::LoraModelInfo info;
    info.single_linear1_dims = {c.inner_dim(), c.inner_dim(), c.inner_dim(), c.mlp_hidden_dim()};
    return {{"transformer", {{"transformer", p_->transformer.get()}, {"text_encoder", p_->text_encoder.get()}}, info}};
  }
  std::vector<const compile::CompiledModule*> compiled_modules() const override {
    return p_->transformer->compiled_modules();
  }

 private:
  std::unique_ptr<FluxPipeline> p_;
  Tensor builtin_embeds_, builtin_pooled_;  // builtins only
};

class WanAdapter final : public AdapterBase {
 public:
  WanAdapter(std::unique_ptr<WanPipeline> p, const std::filesystem::path& folder)
      : AdapterBase(folder, "folder: the whole WanPipeline from the prompt to the frames"), p_(std::move(p)) {}
  explicit WanAdapter(BuiltinWan b, const std::filesystem::path& name)
      : AdapterBase(name, std::move(b.description)), p_(std::move(b.pipe)),
        builtin_embeds_(std::move(b.prompt_embeds)), builtin_negative_(std::move(b.negative_prompt_embeds)),
        builtin_size_{b.width, b.height, b.num_frames} {}
  const WanPipeline* wan_pipeline() const override { return p_.get(); }
  std::string class_name() const override { return "WanPipeline"; }
  bool generates_video() const override { return true; }
  GenerateParams defaults() const override {
    GenerateParams d;  // WanPipeline.__call__'s defaults
    d.height = 480;
    d.width = 832;
    d.num_frames = 81;
    if (builtin_embeds_.defined()) {  // a builtin's own grid
      d.width = builtin_size_[0];
      d.height = builtin_size_[1];
      d.num_frames = builtin_size_[2];
    }
    d.num_inference_steps = 50;
    d.guidance_scale = 5.0;
    d.max_sequence_length = 512;
    folder_defaults_.apply_to(d);
    return d;
  }
  GenerateResult generate(const GenerateParams& in) override {
    const GenerateParams d = defaults();
    check(in.prompt_2.empty() && in.negative_prompt_2.empty(), kCtx,
          "prompt_2 / negative_prompt_2 are FLUX parameters; WanPipeline has one text encoder");
    check(!in.true_cfg_scale, kCtx, "true_cfg_scale is a FLUX parameter; Wan's CFG is guidance_scale (on when > 1)");
    check(in.sigmas.empty(), kCtx, "custom sigmas are not supported by WanPipeline");
    WanCallOptions o;
    if (builtin_embeds_.defined()) {  // a builtin: random prompt embeddings, latents only
      check(in.output_latents_only, kCtx, source_.string(), " has no VAE: set output_latents_only");
      o.prompt_embeds = builtin_embeds_;
      o.negative_prompt_embeds = builtin_negative_;
    } else {
      o.prompt = {in.prompt};
      if (!in.negative_prompt.empty()) o.negative_prompt = {in.negative_prompt};
      else if (folder_defaults_.negative_prompt) o.negative_prompt = {*folder_defaults_.negative_prompt};
    }
    o.num_videos_per_prompt = in.num_outputs;
    o.max_sequence_length = in.max_sequence_length > 0 ? in.max_sequence_length : d.max_sequence_length;
    o.height = in.height > 0 ? in.height : d.height;
    o.width = in.width > 0 ? in.width : d.width;
    o.num_frames = in.num_frames > 0 ? in.num_frames : d.num_frames;
    o.num_inference_steps = in.num_inference_steps > 0 ? in.num_inference_steps : d.num_inference_steps;
    o.guidance_scale = value_or(in.guidance_scale, *d.guidance_scale);
    o.guidance_scale_2 = in.guidance_scale_2 ? in.guidance_scale_2 : d.guidance_scale_2;
    o.seed = in.seed;
    o.latents = in.latents;
    o.output_type = in.output_latents_only ? "latent" : "np";
    o.callback = in.on_step;
    if (in.on_preview && in.preview_every > 0) {
      const int64_t total = o.num_inference_steps;
      o.latents_observer = [&in, total](int64_t step, const Tensor& latents) {  // [B, C, T, h, w]
        if (!preview_due(in, step, total)) return;
        const Tensor first = latents.select(0, 0);  // [C, T, h, w]
        in.on_preview(step, preview_rgb(first.select(1, first.size(1) / 2)));
      };
    }
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
    const auto o = compile_options(mode, autotune, reduce_overhead_);
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
  void set_execution_device(Device d) override { p_->device = d; }
  std::map<std::string, std::string> quantization() const override { return p_->quantization; }

 protected:
  offload::PipelineOffloader& offloader() override { return p_->offloader; }
  offload::NamedModules components() const override { return p_->offload_components(); }
  const char* offload_seq() const override { return WanPipeline::model_cpu_offload_seq; }
  std::vector<PipelineLoras::Place> lora_places() const override {
    // Diffusers' WanLoraLoaderMixin: "transformer.*" keys into `transformer`, or into `transformer_2` with
    // load_into_transformer_2 (a folder with only transformer_2 loads there by default).
    lora::LoraModelInfo info;
    info.family = "wan";
    std::vector<PipelineLoras::Place> out;
    if (p_->transformer) out.push_back({"transformer", {{"transformer", p_->transformer.get()}}, info});
    if (p_->transformer_2) out.push_back({"transformer_2", {{"transformer", p_->transformer_2.get()}}, info});
    return out;
  }
  std::vector<const compile::CompiledModule*> compiled_modules() const override {
    std::vector<const compile::CompiledModule*> out;
    for (auto* t : {p_->transformer.get(), p_->transformer_2.get()})
      if (t)
        for (const auto* m : t->compiled_modules()) out.push_back(m);
    return out;
  }

 private:
  std::unique_ptr<WanPipeline> p_;
  Tensor builtin_embeds_, builtin_negative_;  // builtins only
  int64_t builtin_size_[3] = {0, 0, 0};       // width, height, frames
};
}  // namespace

namespace detail {
const PipelineAccess& access_of(const DiffusionPipeline& p) {
  const auto* a = dynamic_cast<const PipelineAccess*>(&p);
  check(a != nullptr, kCtx, "not a pipeline made by DiffusionPipeline::from_pretrained");
  return *a;
}

const FluxPipeline& flux_of(const DiffusionPipeline& p, const char* what) {
  const auto& a = access_of(p);
  check(a.flux_pipeline() != nullptr, what, a.source_folder().string(), " is a ", p.class_name(),
        "; only FluxPipeline is supported so far");
  check(!a.builtin(), what, a.source_folder().string(), " is a builtin model (no folder to write from)");
  return *a.flux_pipeline();
}
}  // namespace detail

// A DiffusionPipeline not made by from_pretrained takes no LoRA.
std::string DiffusionPipeline::load_lora(const std::filesystem::path& file, const std::string&, double, bool, bool, bool) {
  fail("lora", file.string(), ": ", class_name(), " takes no LoRA adapters");
}
void DiffusionPipeline::set_adapters(const std::vector<std::string>&, const std::vector<double>&) {
  fail("lora", "set_adapters: ", class_name(), " takes no LoRA adapters");
}
std::vector<std::string> DiffusionPipeline::fuse_lora(double) { fail("lora", "fuse_lora: ", class_name(), " takes no LoRA adapters"); }
void DiffusionPipeline::unfuse_lora() {}
void DiffusionPipeline::unload_lora(const std::string&) {}

std::string DiffusionPipeline::pipeline_class_of(const std::filesystem::path& folder) {
  if (const auto b = builtin_name(folder)) return builtin_pipeline_class(*b);
  check(std::filesystem::is_regular_file(folder / "model_index.json"), kCtx, folder.string(),
        " is not a Diffusers pipeline folder (no model_index.json)");
  return io::DiffusersFolder::open(folder).pipeline_class();
}

std::unique_ptr<DiffusionPipeline> DiffusionPipeline::from_pretrained(const std::filesystem::path& folder,
                                                                      const PipelineOptions& opt) {
  const std::string cls = pipeline_class_of(folder);
  check_execution_device(opt.device);  // before anything loads: no backend / no device / missing op kernels
  const auto placed = [&opt](auto adapter) {
    adapter->place_on(opt.device);
    return std::unique_ptr<DiffusionPipeline>(std::move(adapter));
  };
  if (const auto b = builtin_name(folder)) {
    if (cls == "FluxPipeline") return placed(std::make_unique<FluxAdapter>(make_builtin_flux(*b, opt), folder));
    return placed(std::make_unique<WanAdapter>(make_builtin_wan(*b, opt), folder));
  }
  if (cls == "FluxPipeline") {
    FluxPipelineLoadOptions lo;
    lo.load_text_encoders = opt.load_text_encoders;
    lo.transformer_file = opt.transformer_file;
    lo.quantization_config = parse_quant(opt.quantization_config_json);
    lo.convert_pre_quantized = opt.convert_pre_quantized;
    return placed(std::make_unique<FluxAdapter>(FluxPipeline::from_pretrained(folder, opt.dtype, lo), folder));
  }
  if (cls == "WanPipeline") {
    WanPipelineLoadOptions lo;
    lo.transformer_file = opt.transformer_file;
    lo.load_text_encoder = opt.load_text_encoders;
    lo.quantization_config = parse_quant(opt.quantization_config_json);
    lo.convert_pre_quantized = opt.convert_pre_quantized;
    return placed(std::make_unique<WanAdapter>(WanPipeline::from_pretrained(folder, opt.dtype, lo), folder));
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

std::vector<uint8_t> encode_image(const Tensor& image_u8, const std::string& format,
                                  const std::vector<std::pair<std::string, std::string>>& metadata) {
  const Tensor img = image_u8.dim() == 4 ? image_u8.select(0, 0) : image_u8;
  check(img.dtype() == DType::u8 && img.dim() == 3 && img.size(2) == 3, kCtx,
        "encode_image takes uint8 [H, W, 3] (or [1, H, W, 3]), got ", image_u8.str());
  const Tensor c = img.contiguous();
  if (format == "png") {
    io::PngText t(metadata.begin(), metadata.end());
    return io::encode_png(c.data<uint8_t>(), c.size(1), c.size(0), t);
  }
  check(format == "jpeg" || format == "webp", kCtx, "image format must be png, jpeg or webp, got '", format, "'");
  return io::encode_still(c.data<uint8_t>(), c.size(1), c.size(0), format);
}

}  // namespace diffq
