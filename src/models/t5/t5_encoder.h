// The T5 encoder as transformers 5.24 defines T5EncoderModel (models/t5/modeling_t5.py). FLUX.1's
// text_encoder_2 (T5-v1.1-XXL): pre-norm blocks of self-attention with a learned relative-position bias
// (shared by all blocks, owned by block 0) and a (gated) feed-forward, T5LayerNorm = RMS norm without
// mean subtraction, and no 1/sqrt(d) scaling in attention (T5 folds it into the weights).
//
// Parameter names equal the checkpoint keys ("shared.weight",
// "encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.0.layer.1.DenseReluDense.wo.weight").
// encoder.embed_tokens is tied to `shared` (the same tensor): only "shared.weight" is a parameter, and
// t5_encoder_state_dict() maps a checkpoint that stores either key, or both, onto it.
//
// dtypes follow transformers: T5LayerNorm computes in float32 and rounds to its weight's dtype; the
// "wo" projections stay float32 when loading in float16 (_keep_in_fp32_modules, which transformers
// applies only for float16), so the residual stream becomes float32 after the first feed-forward as
// torch's type promotion makes it; in float16 the residual is clamped after each sub-layer as T5Block does.
//
// UMT5 (transformers' models/umt5, WanPipeline's text_encoder, umt5-xxl) is the same network except that
// EVERY block's self-attention owns its relative_attention_bias
// ("encoder.block.N.layer.0.SelfAttention.relative_attention_bias.weight" for each N) and computes its own
// position bias from it; T5Config::umt5 selects it (config.json model_type "umt5" or an UMT5* architecture).
// The padding mask, the dtypes, the float16 clamp and the kept-float32 "wo" are T5's.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "io/diffusers_folder.h"
#include "io/json_config.h"
#include "modules/layers.h"
#include "modules/state_dict.h"

namespace diffq::t5 {

// T5Config (configuration_t5.py) with transformers' defaults; unknown keys are ignored.
struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t d_ff = 2048;
  int64_t num_layers = 6;
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  std::string feed_forward_proj = "relu";  // "<act>" or "gated-<act>"
  // Derived from feed_forward_proj as transformers' __post_init__ does ("gated-gelu" -> gelu_new).
  std::string dense_act_fn = "relu";
  bool is_gated_act = false;
  // UMT5: a relative_attention_bias in every block (not only block 0), each block using its own.
  bool umt5 = false;

  // T5Config, or UMT5Config (its defaults: vocab 250112, d_ff 1024, 8 layers, 6 heads, "gated-gelu") when
  // model_type is "umt5" or architectures names an UMT5 class.
  static T5Config from_json(const io::JsonConfig& cfg);
  void set_feed_forward_proj(const std::string& proj, const std::string& source = "T5Config");
  void validate(const std::string& source = "T5Config") const;
};

// T5LayerNorm: w * (x / sqrt(mean(x^2) + eps)), the normalisation in float32, rounded to w's dtype.
class T5LayerNorm : public Module {
 public:
  T5LayerNorm(int64_t dim, double eps);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);
  double eps;
  Parameter weight;
};

class T5Attention : public Module {
 public:
  T5Attention(const T5Config& c, bool has_relative_attention_bias);
  // x [B, S, d_model]; position_bias: additive mask [1 or B, H, S, S] -> [B, S, d_model]
  Tensor operator()(const Tensor& x, const Tensor& position_bias) {
    return call([&] { return forward(x, position_bias); });
  }
  Tensor forward(const Tensor& x, const Tensor& position_bias);
  // [1, H, Sq, Sk] in relative_attention_bias's dtype (bidirectional buckets: an encoder), computed on `d`:
  // the device the hidden states are on, which is where the table is when the layer runs (with leaf-level
  // group offloading the table is onloaded by the embedding's own hook, after the buckets are made).
  Tensor compute_bias(int64_t query_length, int64_t key_length, Device d);

  int64_t n_heads, d_kv, num_buckets, max_distance;
  bool has_relative_attention_bias;
  Linear q, k, v, o;
  Embedding relative_attention_bias;  // [num_buckets, H], registered in block 0 only
};

class T5LayerSelfAttention : public Module {
 public:
  T5LayerSelfAttention(const T5Config& c, bool has_relative_attention_bias);
  Tensor operator()(const Tensor& x, const Tensor& bias) { return call([&] { return forward(x, bias); }); }
  Tensor forward(const Tensor& x, const Tensor& bias);
  T5Attention SelfAttention;
  T5LayerNorm layer_norm;
};

class T5DenseReluDense : public Module {  // T5DenseActDense or T5DenseGatedActDense
 public:
  explicit T5DenseReluDense(const T5Config& c);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);
  std::string act;
  bool gated;
  Linear wi, wi_0, wi_1, wo;  // wi when not gated; wi_0 (activated) and wi_1 (linear) when gated
};

class T5LayerFF : public Module {
 public:
  explicit T5LayerFF(const T5Config& c);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);
  T5DenseReluDense DenseReluDense;
  T5LayerNorm layer_norm;
};

// T5Block.layer, a torch ModuleList of [T5LayerSelfAttention, T5LayerFF] (an encoder has no cross-attention).
class T5BlockLayers : public Module {
 public:
  T5BlockLayers(const T5Config& c, bool has_relative_attention_bias);
  T5LayerSelfAttention self_attention;  // "0"
  T5LayerFF ff;                          // "1"
};

class T5Block : public Module {
 public:
  T5Block(const T5Config& c, bool has_relative_attention_bias);
  Tensor operator()(const Tensor& x, const Tensor& bias) { return call([&] { return forward(x, bias); }); }
  Tensor forward(const Tensor& x, const Tensor& bias);
  T5BlockLayers layer;
};

class T5Stack : public Module {
 public:
  explicit T5Stack(const T5Config& c);
  // Block i's position bias [1, H, S, S]: its own table under UMT5, block 0's under T5.
  Tensor position_bias(size_t i, int64_t S, Device d);
  bool umt5;
  ModuleList<T5Block> block;
  T5LayerNorm final_layer_norm;
};

class T5EncoderModel : public Module {
 public:
  explicit T5EncoderModel(const T5Config& c);

  // input_ids [B, S] i64; attention_mask (optional) [B, S], 1 = attend, 0 = padding (any dtype,
  // read on the CPU): padded keys get the lowest float as transformers' sdpa path gives them.
  // -> last_hidden_state [B, S, d_model] in the compute dtype (final_layer_norm's weight dtype).
  Tensor operator()(const Tensor& input_ids, const Tensor& attention_mask = {}) {
    return call([&] { return forward(input_ids, attention_mask); });
  }
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {});

  // The folder's `component` (a T5 or an UMT5 config.json); with dtype f16 the "wo" weights stay float32 as in
  // transformers.
  static std::unique_ptr<T5EncoderModel> from_pretrained(const io::DiffusersFolder& folder,
                                                         std::string_view component = "text_encoder_2",
                                                         std::optional<DType> dtype = std::nullopt,
      const LoadOptions& hooks = {});  // hooks: only quantize / load_quantized are taken
  // Loads `sd` (see t5_encoder_state_dict) into a new model; strict by default.
  static std::unique_ptr<T5EncoderModel> from_state_dict(const T5Config& c, const StateDict& sd,
                                                         const LoadOptions& opt = {});
  // transformers' _keep_in_fp32_modules for a load in `dtype` (empty unless float16).
  static std::vector<std::string> keep_in_fp32_modules(std::optional<DType> dtype);

  T5Config config;
  Embedding shared;  // [vocab, d_model]; encoder.embed_tokens is the same tensor
  T5Stack encoder;
};

// transformers' UMT5EncoderModel: a T5EncoderModel whose config has umt5 set (WanPipeline's text_encoder).
struct UMT5EncoderModel {
  // The folder's `component` ("text_encoder" in Wan folders); its config.json must be an UMT5 one.
  static std::unique_ptr<T5EncoderModel> from_pretrained(const io::DiffusersFolder& folder,
                                                         std::string_view component = "text_encoder",
                                                         std::optional<DType> dtype = std::nullopt,
                                                         const LoadOptions& hooks = {});
};

// Keys as T5EncoderModel names them: "encoder.embed_tokens.weight" becomes "shared.weight" when that is
// absent (and is dropped when both are present: they are tied); decoder keys are ignored, as
// transformers' _keys_to_ignore_on_load_unexpected = ["decoder"].
StateDict t5_encoder_state_dict(const StateDict& sd);

// Relative position (memory - query) -> bucket, as T5Attention._relative_position_bucket (float32 log).
int64_t relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance);

}  // namespace diffq::t5
