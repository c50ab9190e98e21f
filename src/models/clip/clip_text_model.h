// CLIP's text tower as transformers 5.24 defines CLIPTextModel (models/clip/modeling_clip.py): token +
// learned position embeddings, pre-LayerNorm transformer layers with causal self-attention, a final
// LayerNorm, and the pooled output taken at the end-of-text token. FLUX.1 uses its pooled output
// (text_encoder = openai/clip-vit-large-patch14).
//
// Parameter names equal transformers 5's state-dict keys ("embeddings.token_embedding.weight",
// "encoder.layers.0.self_attn.q_proj.weight", "final_layer_norm.weight"). Hub checkpoints written by
// older transformers prefix them with "text_model."; clip_text_state_dict() removes that prefix as
// transformers' conversion mapping does (PrefixChange(prefix_to_remove="text_model")).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "io/diffusers_folder.h"
#include "io/json_config.h"
#include "modules/layers.h"
#include "modules/state_dict.h"

namespace diffq::clip {

// CLIPTextConfig (configuration_clip.py) with transformers' defaults; unknown keys are ignored.
struct CLIPTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";  // quick_gelu, gelu, gelu_new, gelu_pytorch_tanh, relu, silu
  double layer_norm_eps = 1e-5;
  int64_t eos_token_id = 49407;  // 2 (the legacy value): pool at argmax(input_ids) instead

  static CLIPTextConfig from_json(const io::JsonConfig& cfg);
  void validate(const std::string& source = "CLIPTextConfig") const;
};

class CLIPTextEmbeddings : public Module {
 public:
  explicit CLIPTextEmbeddings(const CLIPTextConfig& c);
  Tensor operator()(const Tensor& input_ids) { return call([&] { return forward(input_ids); }); }
  Tensor forward(const Tensor& input_ids);  // [B, S] i64 -> [B, S, H]
  Embedding token_embedding, position_embedding;
};

class CLIPAttention : public Module {
 public:
  explicit CLIPAttention(const CLIPTextConfig& c);
  Tensor operator()(const Tensor& x, const Tensor& mask) { return call([&] { return forward(x, mask); }); }
  Tensor forward(const Tensor& x, const Tensor& mask);  // [B, S, H] -> [B, S, H]
  int64_t num_heads, head_dim;
  Linear k_proj, v_proj, q_proj, out_proj;
};

class CLIPMLP : public Module {
 public:
  explicit CLIPMLP(const CLIPTextConfig& c);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);
  std::string hidden_act;
  Linear fc1, fc2;
};

class CLIPEncoderLayer : public Module {
 public:
  explicit CLIPEncoderLayer(const CLIPTextConfig& c);
  Tensor operator()(const Tensor& x, const Tensor& mask) { return call([&] { return forward(x, mask); }); }
  Tensor forward(const Tensor& x, const Tensor& mask);
  CLIPAttention self_attn;
  LayerNorm layer_norm1;
  CLIPMLP mlp;
  LayerNorm layer_norm2;
};

class CLIPEncoder : public Module {
 public:
  explicit CLIPEncoder(const CLIPTextConfig& c);
  ModuleList<CLIPEncoderLayer> layers;
};

struct CLIPTextOutput {
  Tensor last_hidden_state;  // [B, S, H]
  Tensor pooler_output;      // [B, H]
};

class CLIPTextModel : public Module {
 public:
  explicit CLIPTextModel(const CLIPTextConfig& c);

  // input_ids [B, S] i64 (S <= max_position_embeddings), on the CPU.
  CLIPTextOutput operator()(const Tensor& input_ids) { return call([&] { return forward(input_ids); }); }
  CLIPTextOutput forward(const Tensor& input_ids);

  // The folder's `component` (config.json + weights), parameters cast to `dtype` when given.
  static std::unique_ptr<CLIPTextModel> from_pretrained(const io::DiffusersFolder& folder,
                                                        std::string_view component = "text_encoder",
                                                        std::optional<DType> dtype = std::nullopt,
      const LoadOptions& hooks = {});  // hooks: only quantize / load_quantized are taken
  // Loads `sd` (any key layout clip_text_state_dict() accepts) into a new model; strict by default.
  static std::unique_ptr<CLIPTextModel> from_state_dict(const CLIPTextConfig& c, const StateDict& sd,
                                                        const LoadOptions& opt = {});

  CLIPTextConfig config;
  CLIPTextEmbeddings embeddings;
  CLIPEncoder encoder;
  LayerNorm final_layer_norm;
};

// A checkpoint's keys as CLIPTextModel names them: strips "text_model.", drops the non-persistent
// "embeddings.position_ids" buffer that older checkpoints saved.
StateDict clip_text_state_dict(const StateDict& sd);

// Where each sequence is pooled (transformers' rule): eos_token_id == 2 -> argmax(input_ids) (the first
// maximum); else the first position holding eos_token_id (0 when there is none, as argmax of zeros).
std::vector<int64_t> clip_pool_positions(const Tensor& input_ids, int64_t eos_token_id);

}  // namespace diffq::clip
