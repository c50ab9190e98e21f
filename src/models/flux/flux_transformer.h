// FluxTransformer2DModel (Diffusers 0.42.1, models/transformers/transformer_flux.py): MM-DiT with
// double-stream blocks (separate image/text weights, joint attention text first) followed by
// single-stream blocks over the concatenated sequence. Module and parameter names equal Diffusers'
// state-dict keys, so a Diffusers folder loads by name.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/json_config.h"
#include "modules/layers.h"
#include "models/common/rope_table_cache.h"
#include "models/common/step_modulation_plan.h"
#include "modules/state_dict.h"

namespace diffq::compile {
class CompiledModule;
}
namespace diffq::cache {
class StepCache;
}
namespace diffq {
struct CacheOptions;
}

namespace diffq::models::flux {

// config.json of the transformer component; defaults are Diffusers' (FLUX.1 sizes).
struct FluxTransformerConfig {
  int64_t patch_size = 1;
  int64_t in_channels = 64;
  int64_t out_channels = 64;  // config null -> in_channels
  int64_t num_layers = 19;
  int64_t num_single_layers = 38;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 4096;
  int64_t pooled_projection_dim = 768;
  bool guidance_embeds = false;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_hidden_dim() const { return inner_dim() * 4; }  // mlp_ratio 4
  static FluxTransformerConfig from_json(const io::JsonConfig& cfg);  // validates
};

// Linear -> SiLU -> Linear (TimestepEmbedding and PixArtAlphaTextProjection share this shape).
class SiluMlp : public Module {
 public:
  SiluMlp(std::string type_name, int64_t in, int64_t hidden);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, in] -> [B, hidden]
  Linear linear_1, linear_2;
};

// CombinedTimestep(Guidance)TextProjEmbeddings: temb = MLP_t(sin(t)) (+ MLP_g(sin(g))) + MLP_txt(pooled).
class TimeTextEmbedding : public Module {
 public:
  TimeTextEmbedding(int64_t dim, int64_t pooled_dim, bool guidance);
  // timestep/guidance [B] already *1000; pooled [B, pooled_dim] -> [B, dim]
  Tensor operator()(const Tensor& t, const Tensor& g, const Tensor& pooled) {
    return call([&] { return forward(t, g, pooled); });
  }
  Tensor forward(const Tensor& t, const Tensor& g, const Tensor& pooled);
  SiluMlp timestep_embedder;
  std::unique_ptr<SiluMlp> guidance_embedder;  // only with guidance_embeds
  SiluMlp text_embedder;
};

// AdaLayerNormZero / AdaLayerNormZeroSingle / AdaLayerNormContinuous: linear(SiLU(temb)) chunked into
// `chunks` modulation vectors; the LayerNorm has no affine parameters (eps 1e-6).
class AdaNorm : public Module {
 public:
  AdaNorm(std::string type_name, int64_t dim, int64_t chunks);
  std::vector<Tensor> modulation(const Tensor& temb);  // chunks x [B, dim]
  Tensor norm(const Tensor& x) const;                  // LN without affine, [B, S, dim]
  int64_t chunks;
  Linear linear;
  // The model's plan of the loop's steps (step_modulation_plan.h): a temb it handed out gets its rows of the
  // linear run once over the window's steps. Null: every call computes its own.
  std::shared_ptr<StepModulationPlan> plan;
};

// net.0 = GELU(tanh) with its `proj` Linear, net.1 = Dropout (no parameters), net.2 = Linear.
class FeedForward : public Module {
 public:
  explicit FeedForward(int64_t dim);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, S, dim] -> [B, S, dim]
  struct Gelu : Module {
    Gelu(int64_t in, int64_t out) : Module("GELU"), proj(in, out) { register_module("proj", proj); }
    Linear proj;
  };
  struct Net : Module {
    explicit Net(int64_t dim) : Module("ModuleList"), gelu(dim, 4 * dim), out(4 * dim, dim) {
      register_module("0", gelu);
      register_module("2", out);
    }
    Gelu gelu;
    Linear out;
  } net;
};

// FluxAttention: per-head RMSNorm on q/k, RoPE, SDPA over the (text-first) joint sequence.
class FluxAttention : public Module {
 public:
  // joint: with the text stream's add_*_proj / norm_added_* / to_add_out; pre_only: no to_out.
  FluxAttention(int64_t heads, int64_t head_dim, bool joint, bool pre_only);
  // Single stream: x [B, S, D] -> [B, S, D] (pre_only: no output projection).
  Tensor self_attention(const Tensor& x, const Tensor& cos, const Tensor& sin);
  // Its heads before the output projection: x [B, S, D] -> SDPA's output [B, H, S, Dh].
  Tensor heads_attention(const Tensor& x, const Tensor& cos, const Tensor& sin);
  // Double stream: returns {image [B, N, D], text [B, T, D]} after to_out.0 / to_add_out.
  std::pair<Tensor, Tensor> joint_attention(const Tensor& img, const Tensor& txt, const Tensor& cos,
                                            const Tensor& sin);
  // Step caching (TaylorSeer) replaces this module's outputs: hook(id, compute) returns them.
  std::function<std::vector<Tensor>(int64_t, const std::function<std::vector<Tensor>()>&)> output_hook;
  int64_t hook_id = 0;
  int64_t heads, head_dim;
  Linear to_q, to_k, to_v;
  RMSNorm norm_q, norm_k;
  std::unique_ptr<Linear> add_q_proj, add_k_proj, add_v_proj, to_add_out;
  std::unique_ptr<RMSNorm> norm_added_q, norm_added_k;
  ModuleList<Linear> to_out;  // "to_out.0" (Dropout at .1 has no parameters)

 private:
  Tensor heads_of(const Tensor& x) const;  // [B, S, H*Dh] -> [B, S, H, Dh] (view)
};

class FluxTransformerBlock : public Module {
 public:
  FluxTransformerBlock(int64_t heads, int64_t head_dim);
  // returns {encoder_hidden_states [B, T, D], hidden_states [B, N, D]} (Diffusers' order)
  std::pair<Tensor, Tensor> operator()(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                       const Tensor& cos, const Tensor& sin) {
    return call([&] {
      return compiled && !attn.output_hook ? run_compiled(img, txt, temb, cos, sin) : forward(img, txt, temb, cos, sin);
    });
  }
  std::pair<Tensor, Tensor> forward(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                    const Tensor& cos, const Tensor& sin);
  // TeaCache's input: norm1(img, emb=temb)'s modulated output [B, N, D] (through this block's hooks).
  Tensor modulated_input(const Tensor& img, const Tensor& temb);
  // Set by FluxTransformer2DModel::compile_repeated_blocks (one graph shared by every such block).
  std::shared_ptr<compile::CompiledModule> compiled;
  std::pair<Tensor, Tensor> run_compiled(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                         const Tensor& cos, const Tensor& sin);
  AdaNorm norm1, norm1_context;
  FluxAttention attn;
  FeedForward ff, ff_context;
};

class FluxSingleTransformerBlock : public Module {
 public:
  FluxSingleTransformerBlock(int64_t heads, int64_t head_dim);
  std::pair<Tensor, Tensor> operator()(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                       const Tensor& cos, const Tensor& sin) {
    return call([&] {
      return compiled && !attn.output_hook ? run_compiled(img, txt, temb, cos, sin) : forward(img, txt, temb, cos, sin);
    });
  }
  std::pair<Tensor, Tensor> forward(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                    const Tensor& cos, const Tensor& sin);
  // Set by FluxTransformer2DModel::compile_repeated_blocks (one graph shared by every such block).
  std::shared_ptr<compile::CompiledModule> compiled;
  std::pair<Tensor, Tensor> run_compiled(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                         const Tensor& cos, const Tensor& sin);
  AdaNorm norm;
  Linear proj_mlp, proj_out;
  FluxAttention attn;
};

// RoPE tables for ids [S, n_axes] (FluxPosEmbed, theta 10000): per axis d_i, freqs in float64,
// cos/sin repeated in place per pair, concatenated -> {cos, sin} each [S, sum(d_i)] float32.
std::pair<Tensor, Tensor> flux_rope_tables(const Tensor& ids, const std::vector<int64_t>& axes_dims,
                                           double theta = 10000.0);

// Intermediates keyed as the fixture's "mid.*" (without the prefix): "x_embedder",
// "context_embedder", "temb", "rope.0", "rope.1", "transformer_blocks.{i}.{0,1}",
// "single_transformer_blocks.{i}.{0,1}", "norm_out".
using FluxIntermediates = std::map<std::string, Tensor>;

class FluxTransformer2DModel : public Module {
 public:
  explicit FluxTransformer2DModel(const FluxTransformerConfig& cfg);

  // Loads <folder>/config.json + weights of a Diffusers component folder (e.g. ".../transformer").
  static std::unique_ptr<FluxTransformer2DModel> from_pretrained(const std::filesystem::path& component_dir,
                                                                 const LoadOptions& opt = {});

  // hidden [B, N, in], encoder [B, T, joint], pooled [B, pooled_dim], timestep [B] (= t/1000),
  // guidance [B] (undefined Tensor when the model has no guidance embedder), txt_ids [T, 3],
  // img_ids [N, 3] -> [B, N, patch^2 * out]. Compute dtype = the parameters' dtype (inputs are cast).
  Tensor operator()(const Tensor& hidden, const Tensor& encoder, const Tensor& pooled, const Tensor& timestep,
                    const Tensor& guidance, const Tensor& txt_ids, const Tensor& img_ids,
                    FluxIntermediates* mids = nullptr) {
    return call([&] { return forward(hidden, encoder, pooled, timestep, guidance, txt_ids, img_ids, mids); });
  }
  Tensor forward(const Tensor& hidden, const Tensor& encoder, const Tensor& pooled, const Tensor& timestep,
                 const Tensor& guidance, const Tensor& txt_ids, const Tensor& img_ids,
                 FluxIntermediates* mids = nullptr);
  // After the RoPE tables: what a full compile captures (cos, sin [T+N, Dh] from flux_rope_tables).
  Tensor forward_body(const Tensor& hidden, const Tensor& encoder, const Tensor& pooled, const Tensor& timestep,
                      const Tensor& guidance, const Tensor& cos, const Tensor& sin, FluxIntermediates* mids = nullptr);

  // torch.compile(transformer): the whole forward after the RoPE tables is one compiled graph.
  // Calls that ask for intermediates (mids) run eagerly.
  void compile(const compile::CompileOptions& o) override;
  // Regional compilation (Diffusers' compile_repeated_blocks): one compiled graph for all
  // FluxTransformerBlocks and one for all FluxSingleTransformerBlocks; the rest stays eager.
  void compile_repeated_blocks(const compile::CompileOptions& o) override;
  void uncompile();
  std::vector<const compile::CompiledModule*> compiled_modules() const;
  // The RoPE tables kept for the positions of the running generation (rope_table_cache.h): dropped by the
  // pipeline when a generation ends.
  void clear_rope_cache() { rope_cache_->clear(); }  // for stats
  // The coming generation's timesteps (each call's `timestep` [B], in order): the norms' modulation linears
  // then run once per window of steps instead of once per call (step_modulation_plan.h: the same values).
  // Calls with other timesteps, compiled graphs and traces compute their own. clear_step_plan() at the end
  // of the generation (the pipeline does both).
  void plan_steps(std::vector<Tensor> timesteps) { step_plan_->plan(std::move(timesteps)); }
  void clear_step_plan() { step_plan_->clear(); }

  // Step caching (Diffusers' enable_cache(config) / disable_cache): FirstBlockCache, MagCache and TeaCache
  // decide at the block loop (forward_body); TaylorSeer hooks every block's attn. With a cache on, a full
  // compile's graph is bypassed (the decision needs the first block's output): use regional compile.
  void enable_cache(const CacheOptions& opt, const std::string& model_name = "transformer");
  void disable_cache();
  cache::StepCache* step_cache() const { return step_cache_.get(); }

  DType compute_dtype() const { return x_embedder.bias.dtype(); }  // dense even when weights are quantized

  FluxTransformerConfig config;
  TimeTextEmbedding time_text_embed;
  Linear context_embedder, x_embedder;
  ModuleList<FluxTransformerBlock> transformer_blocks;
  ModuleList<FluxSingleTransformerBlock> single_transformer_blocks;
  AdaNorm norm_out;  // AdaLayerNormContinuous: (scale, shift) in that order
  Linear proj_out;

 private:
  std::shared_ptr<compile::CompiledModule> compiled_;
  std::shared_ptr<cache::StepCache> step_cache_;
  std::shared_ptr<RopeTableCache> rope_cache_ = std::make_shared<RopeTableCache>();
  std::shared_ptr<StepModulationPlan> step_plan_ = std::make_shared<StepModulationPlan>();
};

}  // namespace diffq::models::flux
