// WanTransformer3DModel (Diffusers 0.42.1, models/transformers/transformer_wan.py), text-to-video:
// Wan2.1 T2V (1.3B / 14B), the Wan2.2 A14B experts (same class, two instances) and Wan2.2 TI2V-5B
// (48 channels, per-token timesteps). Patchify (Conv3d, kernel = stride = patch) -> blocks of
// [AdaLN-modulated self-attention with 3-axis RoPE, cross-attention to the text, AdaLN-modulated
// GELU(tanh) FFN] -> modulated output norm -> proj_out -> unpatchify. Diffusers' float32 islands are
// reproduced: FP32LayerNorm, the scale_shift_table additions and gated residuals in float32, the
// time embedder in its own (kept float32) dtype. Module and parameter names equal Diffusers' keys.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/common/rope_table_cache.h"
#include "io/json_config.h"
#include "models/wan/wan_blocks.h"
#include "modules/state_dict.h"

namespace diffq::cache {
class StepCache;
}
namespace diffq {
struct CacheOptions;
}

namespace diffq::models::wan {

// config.json of the transformer component; defaults are Diffusers' (Wan2.1-T2V-14B sizes).
struct WanTransformerConfig {
  std::vector<int64_t> patch_size = {1, 2, 2};  // (t, h, w)
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 16;
  int64_t out_channels = 16;  // config null or 0 -> in_channels
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;
  std::string qk_norm = "rms_norm_across_heads";  // recorded; Diffusers' WanAttention always has norm_q/norm_k
  double eps = 1e-6;
  std::optional<int64_t> image_dim;          // I2V image embedder: not supported (error)
  std::optional<int64_t> added_kv_proj_dim;  // I2V added K/V projections: not supported (error)
  int64_t rope_max_seq_len = 1024;
  std::optional<int64_t> pos_embed_seq_len;  // only with image_dim

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  static WanTransformerConfig from_json(const io::JsonConfig& cfg);  // validates
  void validate(const std::string& source) const;                     // throws naming `source`
};

// Intermediates keyed as the fixture's "mid.*" (without the prefix): "patch_embedding" [B, N, D],
// "temb" [B, L, D], "timestep_proj" [B, L, 6, D], "text" [B, S, D], "rope.cos"/"rope.sin" [N, Dh],
// "blocks.{i}" [B, N, D], "norm_out" [B, N, D] (modulated, before proj_out).
using WanIntermediates = std::map<std::string, Tensor>;

class WanTransformer3DModel : public Module {
 public:
  explicit WanTransformer3DModel(const WanTransformerConfig& cfg);

  // Loads <dir>/config.json and the weights of a Diffusers component folder (".../transformer").
  static std::unique_ptr<WanTransformer3DModel> from_pretrained(const std::filesystem::path& component_dir,
                                                                const LoadOptions& opt = {});
  // With opt.dtype set, Diffusers' _keep_in_fp32_modules stay float32 (a parameter is kept when one of
  // its dotted components is an entry, e.g. "blocks.3.scale_shift_table"), added to opt.keep_in_fp32.
  // Keys with "norm_added_q" are ignored (Diffusers' _keys_to_ignore_on_load_unexpected).
  static std::unique_ptr<WanTransformer3DModel> from_state_dict(const WanTransformerConfig& cfg, const StateDict& sd,
                                                                const LoadOptions& opt = {});

  // hidden_states [B, C_in, F, H, W] (F, H, W multiples of patch_size); timestep [B], or [B, L] with one
  // timestep per token (L = F/pt * H/ph * W/pw; Wan2.2 TI2V's expand_timesteps), any numeric dtype
  // (WanPipeline passes UniPC's int64 timesteps, or float32 per-token ones) read as float32;
  // encoder_hidden_states [B, S, text_dim]. Inputs are cast to compute_dtype(). -> [B, C_out, F, H, W]
  // in compute_dtype() (the flow / noise prediction).
  Tensor operator()(const Tensor& hidden_states, const Tensor& timestep, const Tensor& encoder_hidden_states,
                    WanIntermediates* mids = nullptr) {
    return call([&] { return forward(hidden_states, timestep, encoder_hidden_states, mids); });
  }
  Tensor forward(const Tensor& hidden_states, const Tensor& timestep, const Tensor& encoder_hidden_states,
                 WanIntermediates* mids = nullptr);
  // After the RoPE tables: what a full compile captures (cos, sin [N, Dh] from wan_rope_tables).
  Tensor forward_body(const Tensor& hidden_states, const Tensor& timestep, const Tensor& encoder_hidden_states,
                      const Tensor& cos, const Tensor& sin, WanIntermediates* mids = nullptr);

  // torch.compile(transformer): the whole forward after the RoPE tables is one compiled graph per input
  // signature. Calls that ask for intermediates (mids) run eagerly.
  void compile(const compile::CompileOptions& o) override;
  // Regional compilation (Diffusers' compile_repeated_blocks, _repeated_blocks = WanTransformerBlock):
  // one compiled graph shared by all blocks; the rest stays eager.
  void compile_repeated_blocks(const compile::CompileOptions& o) override;
  void uncompile();
  std::vector<const compile::CompiledModule*> compiled_modules() const;
  // The RoPE tables kept for the positions of the running generation (rope_table_cache.h): dropped by the
  // pipeline when a generation ends.
  void clear_rope_cache() { rope_cache_->clear(); }  // for stats

  // Step caching (Diffusers' enable_cache(config) / disable_cache): FirstBlockCache and MagCache decide at
  // the block loop (forward_body). With a cache on, a full compile's graph is bypassed: use regional compile.
  void enable_cache(const CacheOptions& opt, const std::string& model_name = "transformer");
  void disable_cache();
  cache::StepCache* step_cache() const { return step_cache_.get(); }

  DType compute_dtype() const { return proj_out.bias.dtype(); }  // dense even when weights are quantized
  // Diffusers' WanTransformer3DModel._keep_in_fp32_modules ("rope" holds only buffers).
  static std::vector<std::string> keep_in_fp32_modules();
  // Parameter names of `m` that Diffusers keeps in float32 (component match against `modules`).
  static std::vector<std::string> keep_in_fp32_parameters(const Module& m, const std::vector<std::string>& modules);

  WanTransformerConfig config;
  PatchConv3d patch_embedding;
  WanConditionEmbedder condition_embedder;
  ModuleList<WanTransformerBlock> blocks;
  // norm_out: FP32LayerNorm without affine (no parameters).
  Linear proj_out;              // [C_out * pt * ph * pw, D]
  Parameter scale_shift_table;  // [1, 2, D]: (shift, scale) in THIS order

 private:
  std::shared_ptr<compile::CompiledModule> compiled_;
  std::shared_ptr<RopeTableCache> rope_cache_ = std::make_shared<RopeTableCache>();
  std::shared_ptr<cache::StepCache> step_cache_;
};

}  // namespace diffq::models::wan
