// diffq's front door: one pipeline type for every family, as Diffusers' DiffusionPipeline.from_pretrained.
//
//   auto pipe = diffq::DiffusionPipeline::from_pretrained("Wan2.1-T2V-1.3B-Diffusers", {.dtype = diffq::DType::bf16});
//   diffq::GenerateParams p = pipe->defaults();          // the pipeline's own defaults (Wan: 480x832, 81 frames, ...)
//   p.prompt = "a cat surfing a wave";
//   diffq::GenerateResult r = pipe->generate(p);         // r.videos_u8 [1, 81, 480, 832, 3]
//   diffq::save_video("cat.mp4", r.videos_u8.select(0, 0), {.fps = 16});
//
// from_pretrained reads model_index.json's `_class_name` (FluxPipeline, WanPipeline) and builds that
// pipeline; each keeps its own defaults and semantics (docs/wan.md, README). Errors are diffq::Error with
// a message naming the file, field or value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diffq/cache.h"
#include "diffq/dtype.h"
#include "diffq/tensor.h"

namespace diffq {

struct PipelineOptions {
  std::optional<DType> dtype;  // compute dtype of every model; nullopt keeps each file's
  // Diffusers' PipelineQuantizationConfig as JSON ({"quant_backend": ..., "quant_kwargs": ...,
  // "components_to_quantize": [...]} or {"quant_mapping": ...}); empty = none. Components saved
  // pre-quantized load as saved whatever this says, unless convert_pre_quantized.
  std::string quantization_config_json;
  // Format conversion (`diffq quantize` from a pre-quantized source): a component saved pre-quantized that
  // the quantization config selects, and the quantized weights of a pre-quantized transformer_file (GGUF,
  // BFL fp8r / nvfp4), are dequantized to `dtype` (float32 when unset) with each library's own math
  // and quantized again with the config's scheme (docs/quantization.md "Converting between formats").
  bool convert_pre_quantized = false;
  std::filesystem::path transformer_file;  // single-file transformer (FLUX: .safetensors / .gguf)
  bool load_text_encoders = true;
  // Where the pipeline runs (Diffusers' pipe.to("cuda")): every component's weights are uploaded there
  // once at load, latents and prompt embeddings live there, the image comes back once. A device this
  // build or machine cannot run (no CUDA backend, no GPU, an op or quantized scheme without a kernel
  // there) is a clear error at load, never a silent CPU run.
  Device device = Device::cpu();
  // Builtin models ("builtin:flux-small", ...): the seed of their random weights (the random prompt
  // embeddings they are fed use seed + 1).
  uint64_t builtin_seed = 0;
};

// Throws a clear Error unless a pipeline can run on `d` here: the build has its backend (CUDA builds
// need nvcc at configure time), the machine has the device, and every op the pipelines call has a
// kernel there. DiffusionPipeline::from_pretrained checks PipelineOptions::device with it before loading.
void check_execution_device(Device d);

// What one generation asks for. 0 / nullopt / empty means "the pipeline's default" (see defaults()).
struct GenerateParams {
  std::string prompt;
  std::string prompt_2;           // FLUX: the T5 prompt (default: prompt)
  std::string negative_prompt;    // Wan: CFG's negative (default ""); FLUX: true CFG's negative
  std::string negative_prompt_2;  // FLUX
  int64_t width = 0, height = 0;
  int64_t num_frames = 0;  // video pipelines (Wan: rounded to 4k + 1 as Diffusers does, said on stderr)
  int64_t num_inference_steps = 0;
  std::vector<double> sigmas;            // FLUX: custom sigmas
  std::optional<double> guidance_scale;  // Wan: CFG scale (on when > 1); FLUX: distilled guidance
  std::optional<double> guidance_scale_2;  // Wan2.2 two-expert folders: the low-noise expert's scale
  std::optional<double> true_cfg_scale;    // FLUX
  int64_t num_outputs = 1;                 // images / videos per prompt (one batch of noise)
  int64_t max_sequence_length = 0;
  uint64_t seed = 0;                       // torch.Generator("cpu").manual_seed(seed)
  Tensor latents;                          // optional initial latents in the pipeline's layout
  bool output_latents_only = false;        // skip the VAE (Diffusers' output_type="latent")
  // Per step: (step index, total, timestep); return false to interrupt (the output is still produced).
  std::function<bool(int64_t step, int64_t total, float timestep)> on_step;
  // Cheap previews for progress UIs: after every `preview_every`-th step (0 = never) and after the last,
  // on_preview gets (step index, rgb_u8 [h, w, 3]) of output 0 (video: its middle latent frame), made from
  // the latents without the VAE (latent channels 0..2, each min-max scaled to 0..255; 1/8 the output size
  // for FLUX and Wan). Called before on_step.
  int64_t preview_every = 0;
  std::function<void(int64_t step, const Tensor& rgb_u8)> on_preview;
};

struct GenerateResult {
  Tensor latents;    // final latents (always)
  double encode_prompt_s = 0, denoise_s = 0, decode_s = 0;  // wall time of each stage
  Tensor images_u8;  // image pipelines: [N, H, W, 3] uint8
  Tensor videos_u8;  // video pipelines: [N, F, H, W, 3] uint8
  Tensor pixels_f32; // the same in [0, 1] float32 (Diffusers' output_type "np")
  int64_t steps_run = 0;
  bool interrupted = false;
  GenerateParams used;  // the parameters as run: defaults filled in, frames rounded
  CacheReport cache;    // step caching: steps computed vs skipped (empty without enable_cache)
};

class DiffusionPipeline {
 public:
  // `folder`: a Diffusers pipeline folder, or a builtin model that needs no download, "builtin:<name>":
  // flux-small | flux-medium | flux-dev-shape | flux-dev-width (FluxPipeline) and wan-small | wan-1.3b-shape |
  // wan-14b-shape (WanPipeline). A builtin is the named transformer config with random weights
  // (PipelineOptions::builtin_seed; dtype default float32; the quantization config's "transformer" entry
  // applies) and the family's scheduler, fed random prompt embeddings: no text encoder, no VAE, so it
  // generates latents only (GenerateParams::output_latents_only) and ignores the prompts. For timing and
  // smoke tests of the transformer at real shapes.
  static std::unique_ptr<DiffusionPipeline> from_pretrained(const std::filesystem::path& folder,
                                                            const PipelineOptions& opt = {});
  // model_index.json's _class_name of a folder, or a builtin's pipeline class (throws naming the file when
  // unreadable).
  static std::string pipeline_class_of(const std::filesystem::path& folder);
  virtual ~DiffusionPipeline() = default;

  virtual std::string class_name() const = 0;  // "FluxPipeline", "WanPipeline"
  virtual bool generates_video() const = 0;
  virtual GenerateParams defaults() const = 0;  // Diffusers' call defaults for this folder
  virtual GenerateResult generate(const GenerateParams& p) = 0;

  // Offloading as the CLI's --offload takes it: model | sequential | group[:N] | leaf | disk[:path];
  // drop_page_cache: the offload files' pages leave the OS page cache after each read (group/leaf/disk).
  // Returns the mode as applied ("group:2", "disk:/tmp/x", ...).
  virtual std::string enable_offload(const std::string& spec, bool drop_page_cache = false) = 0;
  // Picks the offload mode whose working set fits `max_memory` (e.g. "2GiB", or "auto" on a GPU: its free
  // memory now, less a headroom; a size beyond what the GPU has is clamped to it; `max_host_memory` bounds the
  // host RAM of GPU runs), applies it and returns the plan's description.
  virtual std::string enable_memory_budget(const std::string& max_memory, const std::string& max_host_memory = "") = 0;
  // Compile the transformer(s): "full" (one graph) or "regional" (one graph per kind of repeated block);
  // autotune: max-autotune (kernel variants timed on the real shapes, the winners kept in a cache file);
  // reduce_overhead: torch's mode="reduce-overhead": on a device, each compiled graph's work is captured
  // once (a CUDA graph) and replayed (docs/compile.md); on the CPU it changes nothing.
  virtual void compile(const std::string& mode, bool autotune = false, bool reduce_overhead = false) = 0;
  struct CompileReport {
    bool compiled = false;
    int64_t graphs = 0, cache_hits = 0, eager_fallbacks = 0, opaque_nodes = 0, quantized_gemm_nodes = 0;
    double compile_s = 0;
    bool autotune = false;  // the autotune figures below are set
    int64_t autotune_nodes = 0, autotune_tuned = 0, autotune_candidates = 0, autotune_cache_hits = 0,
            autotune_non_default = 0;
    double autotune_s = 0;
    std::string autotune_cache_file;
    // The passes that declined on the pipeline's device ("fuse", ..., "plan", "autotune") because compile
    // has no fused kernels, memory planning or autotuning there, and why (naming the device): its graphs
    // then run op by op through the device's own kernels. Empty on the cpu.
    std::vector<std::string> declined_passes;
    std::string declined_why;
    // reduce-overhead on a device: graphs captured and held, calls replayed, first calls run eagerly
    // (warm-ups), calls that could not be captured and why (the last reason).
    int64_t device_graphs = 0, device_graph_replays = 0, device_graph_warmups = 0, device_graph_refused = 0;
    std::string device_graph_refusal;
  };
  virtual CompileReport compile_report() const = 0;
  // Each quantized component's backend and scheme, e.g. {"transformer": "bitsandbytes_4bit nf4"}.
  virtual std::map<std::string, std::string> quantization() const = 0;

  // Bytes of a component's parameters by kind: packed quantized weights and dense tensors ({0, 0} when the
  // pipeline has no such component), e.g. component_bytes("transformer").
  struct ComponentBytes {
    int64_t quantized = 0, dense = 0;
  };
  virtual ComponentBytes component_bytes(const std::string& component) const { return {}; }
  // One line saying what was loaded: "folder: ..." or, for a builtin, "builtin: random-weight transformer ...".
  virtual std::string description() const { return ""; }
  // The execution device (PipelineOptions::device).
  virtual Device device() const { return Device::cpu(); }

  // ---- step caching (include/diffq/cache.h; Diffusers' transformer.enable_cache(config)) ----
  // On every transformer of the pipeline, each with its own per-context ("cond"/"uncond") state.
  // With compile("full") the transformers are compiled regionally instead (the cache decides inside the
  // block loop); the report's note says so.
  virtual void enable_cache(const CacheOptions& opt) = 0;
  virtual void disable_cache() = 0;

  // ---- LoRA adapters (docs/lora.md), as Diffusers' load_lora_weights / set_adapters / fuse_lora ----
  // FLUX: into the transformer and the CLIP text encoder; Wan: into `transformer`, or with
  // load_into_transformer_2 into a Wan2.2 folder's low-noise expert `transformer_2` (Diffusers'
  // WanLoraLoaderMixin; a folder with only transformer_2 loads there). Formats: Diffusers/PEFT, kohya,
  // ComfyUI, XLabs (FLUX); Diffusers/PEFT and original/ComfyUI naming (Wan). Unknown or mismatched keys are
  // an Error listing them, or with `lenient` a warning on stderr (LoraInfo::warnings). The new adapter is
  // active with `weight`; returns its name ("default_N" when `name` is empty). hotswap: new weights for the
  // already loaded adapter `name` (no recompile after compile()). Load adapters before compile() on every
  // layer they will ever touch: a LoRA on a layer that had none when compiling is refused.
  virtual std::string load_lora(const std::filesystem::path& file, const std::string& name = "", double weight = 1.0,
                                bool lenient = false, bool hotswap = false, bool load_into_transformer_2 = false);
  // The active adapters and their weights (default 1 each); the others stay loaded but inactive.
  virtual void set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights = {});
  // Merges the active adapters (times `scale`) into the dense weights; layers with quantized weights keep
  // running their LoRA unfused (their names are returned). Before enable_offload (refused after).
  virtual std::vector<std::string> fuse_lora(double scale = 1.0);
  virtual void unfuse_lora();  // the original weights come back bit for bit
  virtual void unload_lora(const std::string& name = "");  // "" = every adapter
  struct LoraInfo {
    std::string name, file;
    std::string component;  // "transformer" (FLUX: its text encoder too) or "transformer_2"
    double weight = 1.0;
    bool active = true;
    std::vector<std::string> warnings;  // what loading warned (lenient skips; keys applied unlike Diffusers)
  };
  virtual std::vector<LoraInfo> loras() const { return {}; }  // in loading order
  virtual bool lora_fused() const { return false; }
};

// ---- writing results ----
struct VideoOptions {
  double fps = 16.0;
  std::map<std::string, std::string> metadata;  // written into the container
};
// frames_u8 [F, H, W, 3]: .mp4 (H.264, yuv420p) or .webp (animated), chosen by the extension; atomic.
void save_video(const std::filesystem::path& path, const Tensor& frames_u8, const VideoOptions& opt = {});
// dir/00000.png, 00001.png, ... with the metadata as PNG text chunks; each file atomic.
void save_frames(const std::filesystem::path& dir, const Tensor& frames_u8,
                 const std::map<std::string, std::string>& metadata = {});
// Latents as safetensors (key "latents"), atomic; load_latents reads that key back.
void save_latents(const std::filesystem::path& path, const Tensor& latents);
Tensor load_latents(const std::filesystem::path& path);
// One image [H, W, 3] (or [1, H, W, 3]) as PNG with text chunks; atomic.
void save_image(const std::filesystem::path& path, const Tensor& image_u8,
                const std::vector<std::pair<std::string, std::string>>& metadata = {});
// The same image encoded in memory: "png" (with the metadata as text chunks), "jpeg" or "webp" (quality 90,
// no metadata). Throws naming the format when it is none of these.
std::vector<uint8_t> encode_image(const Tensor& image_u8, const std::string& format,
                                  const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace diffq
