#include "models/wan/wan_transformer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cache/step_cache.h"
#include "compile/compiled_module.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "models/wan/wan_rope.h"
#include "ops/ops.h"

namespace diffq::models::wan {

// ---------------------------------------------------------------- config

WanTransformerConfig WanTransformerConfig::from_json(const io::JsonConfig& j) {
  WanTransformerConfig c;
  const std::string cls = j.get<std::string>("_class_name", "WanTransformer3DModel");
  check(cls == "WanTransformer3DModel", "wan", j.source(), ": _class_name is ", cls,
        ", expected WanTransformer3DModel (VACE / Animate / S2V transformers are other models)");
  c.patch_size = j.get<std::vector<int64_t>>("patch_size", c.patch_size);
  c.num_attention_heads = j.get<int64_t>("num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = j.get<int64_t>("attention_head_dim", c.attention_head_dim);
  c.in_channels = j.get<int64_t>("in_channels", c.in_channels);
  c.out_channels = j.get<int64_t>("out_channels", 0);
  if (c.out_channels == 0) c.out_channels = c.in_channels;  // Diffusers: out_channels or in_channels
  c.text_dim = j.get<int64_t>("text_dim", c.text_dim);
  c.freq_dim = j.get<int64_t>("freq_dim", c.freq_dim);
  c.ffn_dim = j.get<int64_t>("ffn_dim", c.ffn_dim);
  c.num_layers = j.get<int64_t>("num_layers", c.num_layers);
  c.cross_attn_norm = j.get<bool>("cross_attn_norm", c.cross_attn_norm);
  c.qk_norm = j.get<std::string>("qk_norm", "");  // null: Diffusers still builds norm_q / norm_k
  c.eps = j.get<double>("eps", c.eps);
  if (j.has("image_dim")) c.image_dim = j.get<int64_t>("image_dim", 0);
  if (j.has("added_kv_proj_dim")) c.added_kv_proj_dim = j.get<int64_t>("added_kv_proj_dim", 0);
  c.rope_max_seq_len = j.get<int64_t>("rope_max_seq_len", c.rope_max_seq_len);
  if (j.has("pos_embed_seq_len")) c.pos_embed_seq_len = j.get<int64_t>("pos_embed_seq_len", 0);
  c.validate(j.source());
  return c;
}

void WanTransformerConfig::validate(const std::string& src) const {
  check(!image_dim && !added_kv_proj_dim, "wan", src, ": image_dim / added_kv_proj_dim are set (",
        image_dim.value_or(0), " / ", added_kv_proj_dim.value_or(0),
        "): this is an image-to-video (I2V / FLF2V) transformer; only text-to-video Wan transformers are supported");
  check(patch_size.size() == 3, "wan", src, ": patch_size must have 3 entries (t, h, w), got ", patch_size.size());
  for (int64_t p : patch_size) check(p > 0, "wan", src, ": patch_size entries must be positive, got ", p);
  const auto positive = [&](const char* key, int64_t v) {
    check(v > 0, "wan", src, ": ", key, " must be positive, got ", v);
  };
  positive("num_attention_heads", num_attention_heads);
  positive("in_channels", in_channels);
  positive("out_channels", out_channels);
  positive("text_dim", text_dim);
  positive("ffn_dim", ffn_dim);
  positive("rope_max_seq_len", rope_max_seq_len);
  check(attention_head_dim >= 6 && attention_head_dim % 2 == 0, "wan", src,
        ": attention_head_dim must be even and >= 6 (3-axis RoPE), got ", attention_head_dim);
  check(freq_dim >= 2, "wan", src, ": freq_dim must be >= 2, got ", freq_dim);
  check(num_layers >= 0, "wan", src, ": num_layers must not be negative, got ", num_layers);
  check(eps > 0, "wan", src, ": eps must be positive, got ", eps);
}

// ---------------------------------------------------------------- model

WanTransformer3DModel::WanTransformer3DModel(const WanTransformerConfig& cfg)
    : Module("WanTransformer3DModel"), config(cfg),
      patch_embedding(cfg.in_channels, cfg.inner_dim(), cfg.patch_size.at(0), cfg.patch_size.at(1),
                      cfg.patch_size.at(2)),
      condition_embedder(cfg.inner_dim(), cfg.freq_dim, cfg.text_dim),
      proj_out(cfg.inner_dim(), cfg.out_channels * cfg.patch_volume()), scale_shift_table({1, 2, cfg.inner_dim()}) {
  config.validate("WanTransformer3DModel");
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    blocks.push_back(std::make_unique<WanTransformerBlock>(cfg.inner_dim(), cfg.ffn_dim, cfg.num_attention_heads,
                                                           cfg.cross_attn_norm, cfg.eps));
  register_module("patch_embedding", patch_embedding);
  register_module("condition_embedder", condition_embedder);
  register_module("blocks", blocks);
  register_module("proj_out", proj_out);
  register_parameter("scale_shift_table", scale_shift_table);
}

std::vector<std::string> WanTransformer3DModel::keep_in_fp32_modules() {
  return {"rope", "time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"};
}

std::vector<std::string> WanTransformer3DModel::keep_in_fp32_parameters(const Module& m,
                                                                        const std::vector<std::string>& modules) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) {
    std::stringstream ss(name);
    std::string part;
    while (std::getline(ss, part, '.')) {
      if (std::find(modules.begin(), modules.end(), part) != modules.end()) {
        out.push_back(name);
        break;
      }
    }
  }
  return out;
}

std::unique_ptr<WanTransformer3DModel> WanTransformer3DModel::from_state_dict(const WanTransformerConfig& cfg,
                                                                              const StateDict& sd,
                                                                              const LoadOptions& opt) {
  auto model = std::make_unique<WanTransformer3DModel>(cfg);
  LoadOptions o = opt;
  if (o.dtype || o.quantize) {
    // Diffusers casts to torch_dtype except parameters with a _keep_in_fp32_modules component; its quantizers
    // (bitsandbytes, torchao, ...) never convert those modules, whatever the dtype (use_keep_in_fp32_modules).
    const auto modules = keep_in_fp32_modules();
    const auto params = keep_in_fp32_parameters(*model, modules);
    o.keep_in_fp32.insert(o.keep_in_fp32.end(), modules.begin(), modules.end());
    o.keep_in_fp32.insert(o.keep_in_fp32.end(), params.begin(), params.end());
  }
  StateDict kept;
  for (const auto& [k, v] : sd)
    if (k.find("norm_added_q") == std::string::npos) kept.emplace(k, v);  // _keys_to_ignore_on_load_unexpected
  load_state_dict(*model, kept, o);
  return model;
}

std::unique_ptr<WanTransformer3DModel> WanTransformer3DModel::from_pretrained(const std::filesystem::path& dir,
                                                                              const LoadOptions& opt) {
  const auto cfg_path = dir / "config.json";
  std::ifstream f(cfg_path);
  check(bool(f), "wan", "cannot open ", cfg_path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("wan", cfg_path.string(), ": invalid JSON: ", e.what());
  }
  const auto cfg = WanTransformerConfig::from_json(io::JsonConfig(std::move(j), cfg_path.string()));
  LoadOptions o = opt;
  if (o.source.empty()) o.source = dir.string();
  return from_state_dict(cfg, io::load_weight_files(io::find_weight_files(dir)), o);
}

Tensor WanTransformer3DModel::forward(const Tensor& hidden, const Tensor& timestep, const Tensor& encoder,
                                      WanIntermediates* mids) {
  const WanTransformerConfig& c = config;
  const auto record = [&](const std::string& name, const Tensor& t) {
    if (mids) (*mids)[name] = t;
  };
  check(hidden.dim() == 5 && hidden.size(1) == c.in_channels, "wan", "hidden_states must be [B, ", c.in_channels,
        ", F, H, W], got ", hidden.str());
  const int64_t B = hidden.size(0), F = hidden.size(2), H = hidden.size(3), W = hidden.size(4);
  const int64_t pt = c.patch_size[0], ph = c.patch_size[1], pw = c.patch_size[2];
  const int64_t f = F / pt, h = H / ph, w = W / pw, N = f * h * w;
  check(F % pt == 0 && H % ph == 0 && W % pw == 0, "wan", "latent size F x H x W = ", F, "x", H, "x", W,
        " is not a multiple of patch_size (", pt, ", ", ph, ", ", pw, ")");
  check(encoder.dim() == 3 && encoder.size(0) == B && encoder.size(2) == c.text_dim, "wan",
        "encoder_hidden_states must be [", B, ", S, ", c.text_dim, "], got ", encoder.str());
  check((timestep.dim() == 1 && timestep.size(0) == B) ||
            (timestep.dim() == 2 && timestep.size(0) == B && timestep.size(1) == N),
        "wan", "timestep must be [", B, "] or [", B, ", ", N, "] (one per token), got ", timestep.str());

  // RoPE tables eagerly from the grid size (host math; a compiled graph receives them as inputs).
  const Device dev = hidden.device();
  // Cached by the grid: the same every step of a generation.
  const auto [cos, sin] = rope_cache_->get({double(f), double(h), double(w)}, dev, [&] {
    const auto [c0, s0] = wan_rope_tables(c.attention_head_dim, f, h, w, c.rope_max_seq_len);  // [N, Dh] f32
    return std::make_pair(c0.to(dev), s0.to(dev));
  });
  record("rope.cos", cos);
  record("rope.sin", sin);
  const Tensor t = timestep.to(dev);
  if (compiled_ && !mids && !step_cache_) return compiled_->run(*this, {hidden, t, encoder, cos, sin})[0];
  return forward_body(hidden, t, encoder, cos, sin, mids);
}

Tensor WanTransformer3DModel::forward_body(const Tensor& hidden, const Tensor& timestep, const Tensor& encoder,
                                           const Tensor& cos, const Tensor& sin, WanIntermediates* mids) {
  const WanTransformerConfig& c = config;
  const auto record = [&](const std::string& name, const Tensor& t) {
    if (mids) (*mids)[name] = t;
  };
  const int64_t B = hidden.size(0), F = hidden.size(2), H = hidden.size(3), W = hidden.size(4);
  const int64_t pt = c.patch_size[0], ph = c.patch_size[1], pw = c.patch_size[2];
  const int64_t f = F / pt, h = H / ph, w = W / pw, D = c.inner_dim(), Co = c.out_channels;
  const DType dt = compute_dtype(), f32 = DType::f32;

  Tensor x = patch_embedding(hidden.to(dt));  // [B, N, D]
  record("patch_embedding", x);
  const WanConditionEmbedder::Out cond = condition_embedder(timestep, encoder.to(dt), dt);
  record("temb", cond.temb);                    // [B, L, D]
  record("timestep_proj", cond.timestep_proj);  // [B, L, 6, D]
  record("text", cond.text);                    // [B, S, D]

  // blocks [begin, end) on the hidden states (Wan's blocks return only hidden_states: no text stream).
  const auto run_blocks = [&](int64_t begin, int64_t end, const cache::Streams& in) {
    Tensor y = in.x;
    for (int64_t i = begin; i < end; ++i) {
      y = blocks[size_t(i)](y, cond.text, cond.timestep_proj, cos, sin);  // [B, N, D]
      record("blocks." + std::to_string(i), y);
    }
    return cache::Streams{y, Tensor()};
  };
  const int64_t nb = int64_t(blocks.size());
  // With a step cache the cache decides which ranges of the loop run (cache/step_cache.h).
  x = (step_cache_ && nb > 0 ? step_cache_->run_blocks({x, Tensor()}, run_blocks, nullptr)
                             : run_blocks(0, nb, {x, Tensor()})).x;

  // (shift, scale) = scale_shift_table + temb in float32 (SHIFT first); FP32LayerNorm, modulate, back.
  const Tensor table = scale_shift_table.dense().to(f32).view({1, 1, 2, D});  // [1, 1, 2, D]
  const Tensor mod = ops::add(table, cond.temb.to(f32).unsqueeze(2));         // [B, L, 2, D]
  const Tensor shift = mod.select(2, 0), scale = mod.select(2, 1);            // [B, L, D]
  const Tensor y = modulated_layer_norm(x, shift, scale, c.eps, dt);          // [B, N, D]
  record("norm_out", y);
  const Tensor out = proj_out(y);  // [B, N, pt*ph*pw*Co], per token (pt, ph, pw, c) with c fastest
  // unpatchify: [B, f, h, w, pt, ph, pw, Co] -> [B, Co, f, pt, h, ph, w, pw] -> [B, Co, F, H, W]
  return out.view({B, f, h, w, pt, ph, pw, Co}).permute({0, 7, 1, 4, 2, 5, 3, 6}).reshape({B, Co, F, H, W});
}

// ---------------------------------------------------------------- compile

void WanTransformer3DModel::compile(const compile::CompileOptions& o) {
  uncompile();
  compiled_ = std::make_shared<compile::CompiledModule>(
      [](Module& m, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            static_cast<WanTransformer3DModel&>(m).forward_body(in[0], in[1], in[2], in[3], in[4])};
      },
      o);
}

void WanTransformer3DModel::compile_repeated_blocks(const compile::CompileOptions& o) {
  uncompile();
  auto shared = std::make_shared<compile::CompiledModule>(
      [](Module& m, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{static_cast<WanTransformerBlock&>(m).forward(in[0], in[1], in[2], in[3], in[4])};
      },
      o);
  for (auto& b : blocks) b->compiled = shared;
}

void WanTransformer3DModel::enable_cache(const CacheOptions& opt, const std::string& model_name) {
  disable_cache();
  std::vector<std::string> names;
  for (size_t i = 0; i < blocks.size(); ++i) names.push_back("blocks." + std::to_string(i));
  step_cache_ = cache::make_step_cache(opt, model_name, names, /*is_flux=*/false);
}

void WanTransformer3DModel::disable_cache() { step_cache_.reset(); }

void WanTransformer3DModel::uncompile() {
  compiled_.reset();
  for (auto& b : blocks) b->compiled.reset();
}

std::vector<const compile::CompiledModule*> WanTransformer3DModel::compiled_modules() const {
  std::vector<const compile::CompiledModule*> out;
  if (compiled_) out.push_back(compiled_.get());
  if (blocks.size() && blocks[0].compiled) out.push_back(blocks[0].compiled.get());
  return out;
}

}  // namespace diffq::models::wan
