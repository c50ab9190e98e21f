#include "models/t5/t5_encoder.h"

#include <cfloat>
#include <cmath>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::t5 {

namespace {

// transformers' ACT2FN entries a T5 feed-forward may name.
Tensor activation(const Tensor& x, const std::string& name) {
  if (name == "relu") return ops::maximum(x, Tensor::zeros({}, x.dtype(), x.device()));
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ops::gelu(x, /*tanh_approx=*/true);
  if (name == "gelu") return ops::gelu(x, /*tanh_approx=*/false);
  if (name == "silu" || name == "swish") return ops::silu(x);
  if (name == "quick_gelu") return ops::quick_gelu(x);
  fail("t5", "unsupported dense_act_fn '", name, "'");
}

bool known_activation(const std::string& a) {
  for (const char* k : {"relu", "gelu_new", "gelu_pytorch_tanh", "gelu", "silu", "swish", "quick_gelu"})
    if (a == k) return true;
  return false;
}

// A residual sum with torch's type promotion: mixed float dtypes (bf16/f16 + f32) give float32.
Tensor residual_add(const Tensor& x, const Tensor& y) {
  if (x.dtype() == y.dtype()) return ops::add(x, y);
  return ops::add(x.to(DType::f32), y.to(DType::f32));
}

// T5Block's float16 guard: when any value overflowed to inf, clamp everything to +-(65504 - 1000).
// (Clamping to +-65504 otherwise changes no finite value, so only the inf case acts.)
Tensor clamp_fp16(const Tensor& x) {
  if (x.dtype() != DType::f16) return x;
  std::vector<int64_t> all(size_t(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) all[size_t(d)] = d;
  double m = ops::max(ops::unary(x, ops::UnaryFn::abs), all).item();
  if (std::isnan(m)) {  // NaN may hide an inf in the reduction: look at every value
    m = 0;
    for (float v : x.to_f32_vector())
      if (std::isinf(v)) m = INFINITY;
  }
  if (!std::isinf(m)) return x;
  return ops::clamp(x, -(65504.0 - 1000.0), 65504.0 - 1000.0);
}

}  // namespace

// ---- config ----

void T5Config::set_feed_forward_proj(const std::string& proj, const std::string& source) {
  const size_t dash = proj.find('-');
  const bool gated = dash != std::string::npos;
  check(!gated || (proj.substr(0, dash) == "gated" && proj.find('-', dash + 1) == std::string::npos),
        "t5", source, ": feed_forward_proj '", proj, "' is not of the form 'gated-{ACT_FN}' or '{ACT_FN}'");
  feed_forward_proj = proj;
  is_gated_act = gated;
  dense_act_fn = gated ? proj.substr(dash + 1) : proj;
  if (proj == "gated-gelu") dense_act_fn = "gelu_new";  // transformers' backwards-compatible alias
}

T5Config T5Config::from_json(const io::JsonConfig& cfg) {
  const std::string source = cfg.source().empty() ? "T5Config" : cfg.source();
  T5Config c;
  c.umt5 = cfg.get<std::string>("model_type", "") == "umt5";
  for (const std::string& a : cfg.get<std::vector<std::string>>("architectures", {}))
    if (a.rfind("UMT5", 0) == 0) c.umt5 = true;
  if (c.umt5) {  // UMT5Config's defaults
    c.vocab_size = 250112;
    c.d_ff = 1024;
    c.num_layers = 8;
    c.num_heads = 6;
    c.feed_forward_proj = "gated-gelu";
  }
  c.vocab_size = cfg.get<int64_t>("vocab_size", c.vocab_size);
  c.d_model = cfg.get<int64_t>("d_model", c.d_model);
  c.d_kv = cfg.get<int64_t>("d_kv", c.d_kv);
  c.d_ff = cfg.get<int64_t>("d_ff", c.d_ff);
  c.num_layers = cfg.get<int64_t>("num_layers", c.num_layers);
  c.num_heads = cfg.get<int64_t>("num_heads", c.num_heads);
  c.relative_attention_num_buckets =
      cfg.get<int64_t>("relative_attention_num_buckets", c.relative_attention_num_buckets);
  c.relative_attention_max_distance =
      cfg.get<int64_t>("relative_attention_max_distance", c.relative_attention_max_distance);
  c.layer_norm_epsilon = cfg.get<double>("layer_norm_epsilon", c.layer_norm_epsilon);
  // dense_act_fn in the file is ignored: transformers derives it from feed_forward_proj.
  c.set_feed_forward_proj(cfg.get<std::string>("feed_forward_proj", c.feed_forward_proj), source);
  c.validate(source);
  return c;
}

void T5Config::validate(const std::string& source) const {
  check(vocab_size > 0 && d_model > 0 && d_kv > 0 && d_ff > 0 && num_heads > 0, "t5", source,
        ": sizes must be positive");
  check(num_layers >= 1, "t5", source, ": num_layers must be >= 1, got ", num_layers);
  check(relative_attention_num_buckets >= 4 && relative_attention_max_distance > 0, "t5", source,
        ": relative_attention_num_buckets must be >= 4 and relative_attention_max_distance > 0");
  check(known_activation(dense_act_fn), "t5", source, ": unsupported activation '", dense_act_fn,
        "' (feed_forward_proj '", feed_forward_proj, "')");
}

// ---- relative position buckets ----

int64_t relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {  // half the buckets for keys after the query, half for keys before it
    num_buckets /= 2;
    if (rel > 0) bucket += num_buckets;
    rel = rel < 0 ? -rel : rel;
  } else {
    rel = rel < 0 ? -rel : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (rel < max_exact) return bucket + rel;  // one bucket per distance up close
  // Logarithmically wider buckets up to max_distance, in float32 as torch computes them.
  const float scaled = std::log(float(rel) / float(max_exact)) /
                       float(std::log(double(max_distance) / double(max_exact))) *
                       float(num_buckets - max_exact);
  const int64_t large = max_exact + int64_t(scaled);
  return bucket + (large < num_buckets - 1 ? large : num_buckets - 1);
}

// ---- modules ----

T5LayerNorm::T5LayerNorm(int64_t dim, double e) : Module("T5LayerNorm"), eps(e), weight({dim}) {
  register_parameter("weight", weight);
}

Tensor T5LayerNorm::forward(const Tensor& x) {
  const Tensor& w = weight.dense();  // [D]
  // x * rsqrt(mean(x^2) + eps) in float32; rounded to w's dtype (a float32 w keeps float32).
  const bool half_w = w.dtype() == DType::f16 || w.dtype() == DType::bf16;
  const Tensor n = ops::rms_norm(half_w ? x : x.to(DType::f32), {}, eps).to(w.dtype());  // [..., D]
  return ops::mul(n, w);                                                                  // [..., D]
}

T5Attention::T5Attention(const T5Config& c, bool has_bias)
    : Module("T5Attention"), n_heads(c.num_heads), d_kv(c.d_kv),
      num_buckets(c.relative_attention_num_buckets), max_distance(c.relative_attention_max_distance),
      has_relative_attention_bias(has_bias), q(c.d_model, c.num_heads * c.d_kv, false),
      k(c.d_model, c.num_heads * c.d_kv, false), v(c.d_model, c.num_heads * c.d_kv, false),
      o(c.num_heads * c.d_kv, c.d_model, false), relative_attention_bias(c.relative_attention_num_buckets, c.num_heads) {
  register_module("q", q);
  register_module("k", k);
  register_module("v", v);
  register_module("o", o);
  if (has_bias) register_module("relative_attention_bias", relative_attention_bias);
}

Tensor T5Attention::compute_bias(int64_t Sq, int64_t Sk, Device d) {
  check(has_relative_attention_bias, "t5", "compute_bias on an attention without relative_attention_bias");
  Tensor buckets = Tensor::empty({Sq, Sk}, DType::i64);  // bucket of (key position - query position)
  int64_t* p = buckets.data<int64_t>();
  for (int64_t i = 0; i < Sq; ++i)
    for (int64_t j = 0; j < Sk; ++j)
      p[i * Sk + j] = relative_position_bucket(j - i, /*bidirectional=*/true, num_buckets, max_distance);
  const Tensor values = relative_attention_bias(buckets.to(d));  // [Sq, Sk, H]
  return values.permute({2, 0, 1}).unsqueeze(0).contiguous();    // [1, H, Sq, Sk]
}

Tensor T5Attention::forward(const Tensor& x, const Tensor& position_bias) {
  const int64_t B = x.size(0), S = x.size(1);
  const Tensor qh = q(x).view({B, S, n_heads, d_kv}).transpose(1, 2);  // [B, H, S, d_kv]
  const Tensor kh = k(x).view({B, S, n_heads, d_kv}).transpose(1, 2);  // [B, H, S, d_kv]
  const Tensor vh = v(x).view({B, S, n_heads, d_kv}).transpose(1, 2);  // [B, H, S, d_kv]
  // softmax(q k^T + bias) v: no 1/sqrt(d_kv) scaling in T5.
  const Tensor a = ops::sdpa(qh, kh, vh, position_bias, /*scale=*/1.0);  // [B, H, S, d_kv]
  return o(a.transpose(1, 2).reshape({B, S, n_heads * d_kv}));           // [B, S, d_model]
}

T5LayerSelfAttention::T5LayerSelfAttention(const T5Config& c, bool has_bias)
    : Module("T5LayerSelfAttention"), SelfAttention(c, has_bias), layer_norm(c.d_model, c.layer_norm_epsilon) {
  register_module("SelfAttention", SelfAttention);
  register_module("layer_norm", layer_norm);
}

Tensor T5LayerSelfAttention::forward(const Tensor& x, const Tensor& bias) {
  return residual_add(x, SelfAttention(layer_norm(x), bias));  // [B, S, d_model]
}

T5DenseReluDense::T5DenseReluDense(const T5Config& c)
    : Module(c.is_gated_act ? "T5DenseGatedActDense" : "T5DenseActDense"), act(c.dense_act_fn),
      gated(c.is_gated_act), wi(c.d_model, c.d_ff, false), wi_0(c.d_model, c.d_ff, false),
      wi_1(c.d_model, c.d_ff, false), wo(c.d_ff, c.d_model, false) {
  if (gated) {
    register_module("wi_0", wi_0);
    register_module("wi_1", wi_1);
  } else {
    register_module("wi", wi);
  }
  register_module("wo", wo);
}

Tensor T5DenseReluDense::forward(const Tensor& x) {
  Tensor h = gated ? ops::mul(activation(wi_0(x), act), wi_1(x))  // [B, S, d_ff]
                   : activation(wi(x), act);                      // [B, S, d_ff]
  // wo may be kept in float32 (float16 loads): its input follows it, as in transformers.
  if (!wo.weight.is_quantized() && wo.weight.dtype() != h.dtype()) h = h.to(wo.weight.dtype());
  return wo(h);  // [B, S, d_model]
}

T5LayerFF::T5LayerFF(const T5Config& c)
    : Module("T5LayerFF"), DenseReluDense(c), layer_norm(c.d_model, c.layer_norm_epsilon) {
  register_module("DenseReluDense", DenseReluDense);
  register_module("layer_norm", layer_norm);
}

Tensor T5LayerFF::forward(const Tensor& x) {
  return residual_add(x, DenseReluDense(layer_norm(x)));  // [B, S, d_model]
}

T5BlockLayers::T5BlockLayers(const T5Config& c, bool has_bias)
    : Module("ModuleList"), self_attention(c, has_bias), ff(c) {
  register_module("0", self_attention);
  register_module("1", ff);
}

T5Block::T5Block(const T5Config& c, bool has_bias) : Module("T5Block"), layer(c, has_bias) {
  register_module("layer", layer);
}

Tensor T5Block::forward(const Tensor& x, const Tensor& bias) {
  const Tensor h = clamp_fp16(layer.self_attention(x, bias));  // [B, S, d_model]
  return clamp_fp16(layer.ff(h));                              // [B, S, d_model]
}

T5Stack::T5Stack(const T5Config& c)
    : Module(c.umt5 ? "UMT5Stack" : "T5Stack"), umt5(c.umt5), final_layer_norm(c.d_model, c.layer_norm_epsilon) {
  for (int64_t i = 0; i < c.num_layers; ++i) block.push_back(std::make_unique<T5Block>(c, c.umt5 || i == 0));
  register_module("block", block);
  register_module("final_layer_norm", final_layer_norm);
}

Tensor T5Stack::position_bias(size_t i, int64_t S, Device d) {
  return block[umt5 ? i : 0].layer.self_attention.SelfAttention.compute_bias(S, S, d);  // [1, H, S, S]
}

T5EncoderModel::T5EncoderModel(const T5Config& c)
    : Module(c.umt5 ? "UMT5EncoderModel" : "T5EncoderModel"), config((c.validate(), c)),
      shared(c.vocab_size, c.d_model), encoder(c) {
  register_module("shared", shared);
  register_module("encoder", encoder);
}

Tensor T5EncoderModel::forward(const Tensor& input_ids, const Tensor& attention_mask) {
  check(input_ids.dim() == 2 && input_ids.dtype() == DType::i64, "t5",
        "input_ids must be [B, S] int64, got ", input_ids.str());
  const int64_t B = input_ids.size(0), S = input_ids.size(1);
  check(B > 0 && S > 0, "t5", "empty input_ids ", input_ids.str());

  Tensor x = shared(input_ids);  // [B, S, d_model] (encoder.embed_tokens is shared)
  // Padded keys get float32's lowest value (transformers' sdpa path: where(mask, bias, finfo.min)).
  Tensor pad;  // [B, 1, 1, S] f32 additive, undefined without a mask
  if (attention_mask.defined()) {
    check(attention_mask.shape() == Shape{B, S}, "t5", "attention_mask must be [", B, ", ", S, "], got ",
          attention_mask.str());
    std::vector<float> p(size_t(B * S));
    const std::vector<double> m = attention_mask.to(Device::cpu()).to_f64_vector();
    for (size_t i = 0; i < p.size(); ++i) p[i] = m[i] != 0.0 ? 0.f : -FLT_MAX;  // float32's finfo.min
    pad = Tensor::from_vector(p, {B, 1, 1, S}).to(x.device());
  }
  // The relative-position bias plus the padding mask, for block i: T5 computes it once from block 0 and
  // reuses it; UMT5 computes it in every block from that block's own table.
  auto block_bias = [&](size_t i) {
    Tensor bias = encoder.position_bias(i, S, x.device());  // [1, H, S, S]
    if (!pad.defined()) return bias;
    return ops::add(bias.to(DType::f32), pad.to(bias.device()));  // [B, H, S, S]
  };
  Tensor bias;  // [1 or B, H, S, S]
  for (size_t i = 0; i < encoder.block.size(); ++i) {
    if (encoder.umt5 || !bias.defined()) bias = block_bias(i);
    x = encoder.block[i](x, bias);  // [B, S, d_model]
  }
  return encoder.final_layer_norm(x);  // [B, S, d_model]
}

// ---- loading ----

StateDict t5_encoder_state_dict(const StateDict& sd) {
  StateDict out;
  for (const auto& [k, v] : sd) {
    if (k.rfind("decoder.", 0) == 0 || k.find(".decoder.") != std::string::npos) continue;
    if (k == "encoder.embed_tokens.weight") {
      if (!sd.count("shared.weight")) out.emplace("shared.weight", v);  // tied: one tensor
      continue;
    }
    out.emplace(k, v);
  }
  return out;
}

std::vector<std::string> T5EncoderModel::keep_in_fp32_modules(std::optional<DType> dtype) {
  if (dtype == DType::f16) return {"wo"};
  return {};
}

std::unique_ptr<T5EncoderModel> T5EncoderModel::from_state_dict(const T5Config& c, const StateDict& sd,
                                                                const LoadOptions& opt) {
  auto m = std::make_unique<T5EncoderModel>(c);
  load_state_dict(*m, t5_encoder_state_dict(sd), opt);
  return m;
}

std::unique_ptr<T5EncoderModel> T5EncoderModel::from_pretrained(const io::DiffusersFolder& folder,
                                                                std::string_view component,
                                                                std::optional<DType> dtype, const LoadOptions& hooks) {
  const io::Component& comp = folder.component(component);
  const T5Config c = T5Config::from_json(comp.config);
  const StateDict sd = folder.load_state_dict(component);
  LoadOptions opt;
  opt.dtype = dtype;
  opt.source = (comp.dir / "").string();
  // transformers' quantizers (bitsandbytes, torchao, quanto, ...) never convert a model's
  // _keep_in_fp32_modules ("wo" for T5 / UMT5), whatever the load dtype (HfQuantizer.get_modules_to_not_convert).
  if (hooks.quantize)
    opt.quantize = [q = hooks.quantize](const ParamRef& p, const Tensor& v) -> std::shared_ptr<QuantizedWeight> {
      if (module_name_matches(p.full, {"wo"})) return nullptr;
      return q(p, v);
    };
  opt.load_quantized = hooks.load_quantized;
  // The load's dtype (the file's when none is asked for) decides transformers' fp32 "wo".
  std::optional<DType> effective = dtype;
  if (!effective) {
    auto it = sd.find("shared.weight");
    if (it == sd.end()) it = sd.find("encoder.embed_tokens.weight");
    if (it != sd.end()) effective = it->second.dtype();
  }
  opt.keep_in_fp32 = keep_in_fp32_modules(effective);
  return from_state_dict(c, sd, opt);
}

std::unique_ptr<T5EncoderModel> UMT5EncoderModel::from_pretrained(const io::DiffusersFolder& folder,
                                                                  std::string_view component,
                                                                  std::optional<DType> dtype,
                                                                  const LoadOptions& hooks) {
  const io::Component& comp = folder.component(component);
  check(T5Config::from_json(comp.config).umt5, "t5", comp.config.source(),
        ": not an UMT5 config (model_type \"umt5\" or an UMT5 architecture expected)");
  return T5EncoderModel::from_pretrained(folder, component, dtype, hooks);
}

}  // namespace diffq::t5
