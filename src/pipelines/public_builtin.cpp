#include "pipelines/public_builtin.h"

#include <algorithm>

#include "core/random.h"
#include "diffq/error.h"
#include "models/flux/flux_builtin.h"
#include "models/wan/wan_builtin.h"
#include "modules/quantize_on_load.h"
#include "modules/random_init.h"
#include "quant/quant_method.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "pipeline";
constexpr double kWanFlowShift = 3.0;  // Wan2.1 T2V's scheduler config (480p)

// The quantization config's "transformer" entry applied to the in-memory transformer (Diffusers'
// _keep_in_fp32_modules stay dense, as a load keeps them); the pipeline's quantization maps filled as a load does.
template <class Pipe>
void quantize_transformer(Pipe& p, Module& transformer, const PipelineOptions& opt,
                          const std::vector<std::string>& keep_in_fp32) {
  if (opt.quantization_config_json.empty()) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(opt.quantization_config_json);
  } catch (const std::exception& e) {
    fail(kCtx, "quantization_config_json is not valid JSON: ", e.what());
  }
  const auto cq = PipelineQuantizationConfig::from_json(j, "quantization_config_json").resolve("transformer");
  if (!cq) return;
  std::shared_ptr<const quant::QuantMethod> m = quant::make_quant_method(cq->backend, cq->kwargs);
  quantize_module(transformer, *m, keep_in_fp32);
  p.quantization["transformer"] = m->backend() + " " + m->scheme();
  p.quant_methods["transformer"] = m;
}

UniPCMultistepConfig wan_unipc_config() {
  UniPCMultistepConfig s;
  s.prediction_type = "flow_prediction";
  s.use_flow_sigmas = true;
  s.flow_shift = kWanFlowShift;
  return s;  // the rest: Diffusers' defaults, as Wan2.1's scheduler_config.json (solver_order 2, bh2, ...)
}
}  // namespace

std::optional<std::string> builtin_name(const std::filesystem::path& model) {
  const std::string s = model.string();
  if (s.rfind("builtin:", 0) != 0) return std::nullopt;
  return s.substr(8);
}

std::string builtin_pipeline_class(const std::string& name) {
  const auto& f = models::flux::builtin_flux_names();
  const auto& w = models::wan::builtin_wan_names();
  if (std::find(f.begin(), f.end(), name) != f.end()) return "FluxPipeline";
  if (std::find(w.begin(), w.end(), name) != w.end()) return "WanPipeline";
  std::string known;
  for (const auto& n : f) known += (known.empty() ? "" : ", ") + n;
  for (const auto& n : w) known += ", " + n;
  fail(kCtx, "unknown builtin model 'builtin:", name, "' (known: ", known, ")");
}

BuiltinFlux make_builtin_flux(const std::string& name, const PipelineOptions& opt) {
  check(opt.transformer_file.empty(), kCtx, "builtin:", name, " has its own transformer; transformer_file is for folders");
  const DType dtype = opt.dtype.value_or(DType::f32);
  const auto b = models::flux::builtin_flux(name);
  BuiltinFlux out;
  out.pipe = std::make_unique<FluxPipeline>();
  auto& p = *out.pipe;
  p.transformer = std::make_unique<models::flux::FluxTransformer2DModel>(b.transformer);
  init_parameters_randn(*p.transformer, dtype, opt.builtin_seed);
  quantize_transformer(p, *p.transformer, opt, {});
  p.scheduler = std::make_unique<FlowMatchEulerDiscreteScheduler>(b.scheduler);
  Generator g(opt.builtin_seed + 1);
  out.prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.joint_attention_dim}, g, dtype);
  out.pooled_prompt_embeds = randn_tensor({1, b.transformer.pooled_projection_dim}, g, dtype);
  out.description = "builtin: random-weight transformer + FlowMatchEuler, random prompt embeddings [1, " +
                    std::to_string(b.text_tokens) + ", " + std::to_string(b.transformer.joint_attention_dim) +
                    "], latent output (no text encoder, no VAE)";
  return out;
}

BuiltinWan make_builtin_wan(const std::string& name, const PipelineOptions& opt) {
  using models::wan::WanTransformer3DModel;
  check(opt.transformer_file.empty(), kCtx, "builtin:", name, " has its own transformer; transformer_file is for folders");
  const DType dtype = opt.dtype.value_or(DType::f32);
  const auto b = models::wan::builtin_wan(name);
  BuiltinWan out;
  out.pipe = std::make_unique<WanPipeline>();
  auto& p = *out.pipe;
  // Random weights made in place in `dtype`, Diffusers' _keep_in_fp32_modules in float32 (as a load with
  // that dtype keeps them).
  p.transformer = std::make_unique<WanTransformer3DModel>(b.transformer);
  auto& t = *p.transformer;
  init_parameters_randn(t, dtype, opt.builtin_seed);
  const auto keep_modules = WanTransformer3DModel::keep_in_fp32_modules();
  const auto keep = WanTransformer3DModel::keep_in_fp32_parameters(t, keep_modules);
  for (const auto& [pname, prm] : t.named_parameters())
    if (std::find(keep.begin(), keep.end(), pname) != keep.end() && prm->dtype() != DType::f32)
      prm->set(prm->dense().to(DType::f32), prm->residency());
  quantize_transformer(p, t, opt, keep_modules);
  p.scheduler = std::make_unique<WanScheduler>(wan_unipc_config());
  Generator g(opt.builtin_seed + 1);
  out.prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.text_dim}, g, dtype);
  out.negative_prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.text_dim}, g, dtype);
  out.width = b.latent_width * 8;
  out.height = b.latent_height * 8;
  out.num_frames = (b.latent_frames - 1) * 4 + 1;
  out.description = "builtin: random-weight transformer + UniPC (flow_shift 3.0), random prompt embeddings [1, " +
                    std::to_string(b.text_tokens) + ", " + std::to_string(b.transformer.text_dim) +
                    "], latent output (no text encoder, no VAE)";
  return out;
}

}  // namespace diffq
