#include "models/clip/clip_text_model.h"

#include <cmath>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::clip {

namespace {

// transformers' ACT2FN entries a CLIP config may name.
Tensor activation(const Tensor& x, const std::string& name) {
  if (name == "quick_gelu") return ops::quick_gelu(x);  // x * sigmoid(1.702 x)
  if (name == "gelu") return ops::gelu(x, /*tanh_approx=*/false);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ops::gelu(x, /*tanh_approx=*/true);
  if (name == "silu" || name == "swish") return ops::silu(x);
  if (name == "relu") return ops::maximum(x, Tensor::zeros({}, x.dtype(), x.device()));
  fail("clip", "unsupported hidden_act '", name, "'");
}

bool known_activation(const std::string& a) {
  for (const char* k : {"quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "swish", "relu"})
    if (a == k) return true;
  return false;
}

// Causal mask as a boolean keep-mask: key j is visible from query i when j <= i.
Tensor causal_mask(int64_t S, Device d) {
  Tensor m = Tensor::empty({S, S}, DType::boolean);
  auto* p = static_cast<uint8_t*>(m.data_ptr());
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) p[i * S + j] = j <= i ? 1 : 0;
  return m.view({1, 1, S, S}).to(d);  // [1, 1, S, S]
}

}  // namespace

// ---- config ----

CLIPTextConfig CLIPTextConfig::from_json(const io::JsonConfig& cfg) {
  CLIPTextConfig c;
  c.vocab_size = cfg.get<int64_t>("vocab_size", c.vocab_size);
  c.hidden_size = cfg.get<int64_t>("hidden_size", c.hidden_size);
  c.intermediate_size = cfg.get<int64_t>("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = cfg.get<int64_t>("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = cfg.get<int64_t>("num_attention_heads", c.num_attention_heads);
  c.max_position_embeddings = cfg.get<int64_t>("max_position_embeddings", c.max_position_embeddings);
  c.hidden_act = cfg.get<std::string>("hidden_act", c.hidden_act);
  c.layer_norm_eps = cfg.get<double>("layer_norm_eps", c.layer_norm_eps);
  c.eos_token_id = cfg.get<int64_t>("eos_token_id", c.eos_token_id);
  c.validate(cfg.source().empty() ? "CLIPTextConfig" : cfg.source());
  return c;
}

void CLIPTextConfig::validate(const std::string& source) const {
  check(vocab_size > 0 && hidden_size > 0 && intermediate_size > 0 && num_hidden_layers >= 0 &&
            max_position_embeddings > 0,
        "clip", source, ": sizes must be positive");
  check(num_attention_heads > 0 && hidden_size % num_attention_heads == 0, "clip", source,
        ": hidden_size ", hidden_size, " is not divisible by num_attention_heads ", num_attention_heads);
  check(known_activation(hidden_act), "clip", source, ": unsupported hidden_act '", hidden_act, "'");
}

// ---- modules ----

CLIPTextEmbeddings::CLIPTextEmbeddings(const CLIPTextConfig& c)
    : Module("CLIPTextEmbeddings"), token_embedding(c.vocab_size, c.hidden_size),
      position_embedding(c.max_position_embeddings, c.hidden_size) {
  register_module("token_embedding", token_embedding);
  register_module("position_embedding", position_embedding);
}

Tensor CLIPTextEmbeddings::forward(const Tensor& input_ids) {
  const int64_t S = input_ids.size(1), max_pos = position_embedding.weight.shape()[0];
  check(S <= max_pos, "clip", "sequence length ", S, " exceeds max_position_embeddings ", max_pos);
  const Tensor position_ids = Tensor::arange(S, DType::i64).to(input_ids.device());  // [S]
  const Tensor tok = token_embedding(input_ids);                                     // [B, S, H]
  const Tensor pos = position_embedding(position_ids);                               // [S, H]
  return ops::add(tok, pos);                                                         // [B, S, H]
}

CLIPAttention::CLIPAttention(const CLIPTextConfig& c)
    : Module("CLIPAttention"), num_heads(c.num_attention_heads),
      head_dim(c.hidden_size / c.num_attention_heads), k_proj(c.hidden_size, c.hidden_size),
      v_proj(c.hidden_size, c.hidden_size), q_proj(c.hidden_size, c.hidden_size),
      out_proj(c.hidden_size, c.hidden_size) {
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("q_proj", q_proj);
  register_module("out_proj", out_proj);
}

Tensor CLIPAttention::forward(const Tensor& x, const Tensor& mask) {
  const int64_t B = x.size(0), S = x.size(1);
  const Tensor q = q_proj(x).view({B, S, num_heads, head_dim}).transpose(1, 2);  // [B, h, S, d]
  const Tensor k = k_proj(x).view({B, S, num_heads, head_dim}).transpose(1, 2);  // [B, h, S, d]
  const Tensor v = v_proj(x).view({B, S, num_heads, head_dim}).transpose(1, 2);  // [B, h, S, d]
  const double scale = 1.0 / std::sqrt(double(head_dim));
  const Tensor a = ops::sdpa(q, k, v, mask, scale);                  // [B, h, S, d]
  return out_proj(a.transpose(1, 2).reshape({B, S, num_heads * head_dim}));  // [B, S, H]
}

CLIPMLP::CLIPMLP(const CLIPTextConfig& c)
    : Module("CLIPMLP"), hidden_act(c.hidden_act), fc1(c.hidden_size, c.intermediate_size),
      fc2(c.intermediate_size, c.hidden_size) {
  register_module("fc1", fc1);
  register_module("fc2", fc2);
}

Tensor CLIPMLP::forward(const Tensor& x) {
  const Tensor h = activation(fc1(x), hidden_act);  // [B, S, I]
  return fc2(h);                                    // [B, S, H]
}

CLIPEncoderLayer::CLIPEncoderLayer(const CLIPTextConfig& c)
    : Module("CLIPEncoderLayer"), self_attn(c), layer_norm1(c.hidden_size, c.layer_norm_eps), mlp(c),
      layer_norm2(c.hidden_size, c.layer_norm_eps) {
  register_module("self_attn", self_attn);
  register_module("layer_norm1", layer_norm1);
  register_module("mlp", mlp);
  register_module("layer_norm2", layer_norm2);
}

Tensor CLIPEncoderLayer::forward(const Tensor& x, const Tensor& mask) {
  const Tensor h = ops::add(x, self_attn(layer_norm1(x), mask));  // [B, S, H]
  return ops::add(h, mlp(layer_norm2(h)));                        // [B, S, H]
}

CLIPEncoder::CLIPEncoder(const CLIPTextConfig& c) : Module("CLIPEncoder") {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.push_back(std::make_unique<CLIPEncoderLayer>(c));
  register_module("layers", layers);
}

CLIPTextModel::CLIPTextModel(const CLIPTextConfig& c)
    : Module("CLIPTextModel"), config((c.validate(), c)), embeddings(c), encoder(c),
      final_layer_norm(c.hidden_size, c.layer_norm_eps) {
  register_module("embeddings", embeddings);
  register_module("encoder", encoder);
  register_module("final_layer_norm", final_layer_norm);
}

std::vector<int64_t> clip_pool_positions(const Tensor& input_ids, int64_t eos_token_id) {
  check(input_ids.dim() == 2 && input_ids.dtype() == DType::i64, "clip",
        "input_ids must be [B, S] int64, got ", input_ids.str());
  const int64_t B = input_ids.size(0), S = input_ids.size(1);
  const Tensor ids = input_ids.to(Device::cpu()).contiguous();
  const int64_t* p = ids.data<int64_t>();
  std::vector<int64_t> pos(size_t(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = p + b * S;
    if (eos_token_id == 2) {  // legacy configs: the end-of-text token has the largest id
      for (int64_t s = 1; s < S; ++s)
        if (int32_t(row[s]) > int32_t(row[pos[size_t(b)]])) pos[size_t(b)] = s;  // ids cast to int32
    } else {
      for (int64_t s = 0; s < S; ++s)
        if (row[s] == eos_token_id) {
          pos[size_t(b)] = s;
          break;
        }
    }
  }
  return pos;
}

CLIPTextOutput CLIPTextModel::forward(const Tensor& input_ids) {
  check(input_ids.dim() == 2 && input_ids.dtype() == DType::i64, "clip",
        "input_ids must be [B, S] int64, got ", input_ids.str());
  const int64_t B = input_ids.size(0), S = input_ids.size(1);
  check(B > 0 && S > 0, "clip", "empty input_ids ", input_ids.str());
  Tensor x = embeddings(input_ids);                      // [B, S, H]
  const Tensor mask = causal_mask(S, x.device());        // [1, 1, S, S]
  for (auto& layer : encoder.layers) x = (*layer)(x, mask);  // [B, S, H]
  const Tensor last = final_layer_norm(x);               // [B, S, H]

  const std::vector<int64_t> pos = clip_pool_positions(input_ids, config.eos_token_id);
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < B; ++b) rows.push_back(last.select(0, b).slice(0, pos[size_t(b)], pos[size_t(b)] + 1));
  return {last, ops::concat(rows, 0)};  // [B, S, H], [B, H]
}

// ---- loading ----

StateDict clip_text_state_dict(const StateDict& sd) {
  static constexpr std::string_view prefix = "text_model.";
  StateDict out;
  for (const auto& [k, v] : sd) {
    std::string key = k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : k;
    if (key == "embeddings.position_ids") continue;  // a non-persistent buffer (arange)
    out.emplace(std::move(key), v);
  }
  return out;
}

std::unique_ptr<CLIPTextModel> CLIPTextModel::from_state_dict(const CLIPTextConfig& c, const StateDict& sd,
                                                              const LoadOptions& opt) {
  auto m = std::make_unique<CLIPTextModel>(c);
  load_state_dict(*m, clip_text_state_dict(sd), opt);
  return m;
}

std::unique_ptr<CLIPTextModel> CLIPTextModel::from_pretrained(const io::DiffusersFolder& folder,
                                                              std::string_view component,
                                                              std::optional<DType> dtype, const LoadOptions& hooks) {
  const io::Component& comp = folder.component(component);
  const CLIPTextConfig c = CLIPTextConfig::from_json(comp.config);
  LoadOptions opt;
  opt.dtype = dtype;
  opt.source = (comp.dir / "").string();
  opt.quantize = hooks.quantize;
  opt.load_quantized = hooks.load_quantized;
  return from_state_dict(c, folder.load_state_dict(component), opt);
}

}  // namespace diffq::clip
