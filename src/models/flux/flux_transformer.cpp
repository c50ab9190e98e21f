#include "models/flux/flux_transformer.h"

#include <cmath>
#include <fstream>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "models/common/timestep_embedding.h"
#include "cache/step_cache.h"
#include "compile/compiled_module.h"
#include "ops/ops.h"

namespace diffq::models::flux {

namespace {

constexpr double kNormEps = 1e-6;  // every LayerNorm / RMSNorm of the model

// x_hat * (1 + scale) + shift, with scale/shift [B, D] broadcast over the sequence: Diffusers' two ops in
// x_hat's dtype (the product rounded, then the sum), in one pass.
Tensor modulate(const Tensor& x_hat, const Tensor& shift, const Tensor& scale) {
  return ops::mul_add(x_hat, ops::add_scalar(scale, 1.0).unsqueeze(1), shift.unsqueeze(1), x_hat.dtype(),
                      /*round_product=*/true);  // [B, S, D]
}

// x + gate * y with gate [B, D] broadcast over the sequence: torch's gate * y (in gate's dtype) then x + that
// (in x's dtype); one pass where the two dtypes agree (always, in a run of one compute dtype).
Tensor gated_add(const Tensor& x, const Tensor& gate, const Tensor& y) {
  if (gate.dtype() != x.dtype()) return ops::add(x, ops::mul(gate.unsqueeze(1), y));
  return ops::mul_add(gate.unsqueeze(1), y, x, x.dtype(), /*round_product=*/true);  // [B, S, D]
}

// Diffusers clips the residual streams of fp16 runs to the fp16 range.
Tensor clip_if_f16(const Tensor& x) { return x.dtype() == DType::f16 ? ops::clamp(x, -65504.0, 65504.0) : x; }

}  // namespace

// ---------------------------------------------------------------- config

FluxTransformerConfig FluxTransformerConfig::from_json(const io::JsonConfig& j) {
  FluxTransformerConfig c;
  const std::string cls = j.get<std::string>("_class_name", "FluxTransformer2DModel");
  check(cls == "FluxTransformer2DModel", "flux", j.source(), ": _class_name is ", cls,
        ", expected FluxTransformer2DModel");
  c.patch_size = j.get<int64_t>("patch_size", c.patch_size);
  c.in_channels = j.get<int64_t>("in_channels", c.in_channels);
  c.out_channels = j.get<int64_t>("out_channels", c.in_channels);  // null -> in_channels
  c.num_layers = j.get<int64_t>("num_layers", c.num_layers);
  c.num_single_layers = j.get<int64_t>("num_single_layers", c.num_single_layers);
  c.attention_head_dim = j.get<int64_t>("attention_head_dim", c.attention_head_dim);
  c.num_attention_heads = j.get<int64_t>("num_attention_heads", c.num_attention_heads);
  c.joint_attention_dim = j.get<int64_t>("joint_attention_dim", c.joint_attention_dim);
  c.pooled_projection_dim = j.get<int64_t>("pooled_projection_dim", c.pooled_projection_dim);
  c.guidance_embeds = j.get<bool>("guidance_embeds", c.guidance_embeds);
  c.axes_dims_rope = j.get<std::vector<int64_t>>("axes_dims_rope", c.axes_dims_rope);

  const auto positive = [&](const char* key, int64_t v) {
    check(v > 0, "flux", j.source(), ": ", key, " must be positive, got ", v);
  };
  positive("patch_size", c.patch_size);
  positive("in_channels", c.in_channels);
  positive("out_channels", c.out_channels);
  positive("attention_head_dim", c.attention_head_dim);
  positive("num_attention_heads", c.num_attention_heads);
  positive("joint_attention_dim", c.joint_attention_dim);
  positive("pooled_projection_dim", c.pooled_projection_dim);
  check(c.num_layers >= 0 && c.num_single_layers >= 0, "flux", j.source(), ": negative layer count");
  int64_t rope_sum = 0;
  for (int64_t d : c.axes_dims_rope) {
    check(d > 0 && d % 2 == 0, "flux", j.source(), ": axes_dims_rope entries must be even and positive");
    rope_sum += d;
  }
  check(rope_sum == c.attention_head_dim, "flux", j.source(), ": axes_dims_rope sum to ", rope_sum,
        " but attention_head_dim is ", c.attention_head_dim);
  return c;
}

// ---------------------------------------------------------------- embeddings

SiluMlp::SiluMlp(std::string type_name, int64_t in, int64_t hidden)
    : Module(std::move(type_name)), linear_1(in, hidden), linear_2(hidden, hidden) {
  register_module("linear_1", linear_1);
  register_module("linear_2", linear_2);
}

Tensor SiluMlp::forward(const Tensor& x) { return linear_2(ops::silu(linear_1(x))); }  // [B, hidden]

TimeTextEmbedding::TimeTextEmbedding(int64_t dim, int64_t pooled_dim, bool guidance)
    : Module(guidance ? "CombinedTimestepGuidanceTextProjEmbeddings" : "CombinedTimestepTextProjEmbeddings"),
      timestep_embedder("TimestepEmbedding", 256, dim),
      text_embedder("PixArtAlphaTextProjection", pooled_dim, dim) {
  register_module("timestep_embedder", timestep_embedder);
  if (guidance) {
    guidance_embedder = std::make_unique<SiluMlp>("TimestepEmbedding", 256, dim);
    register_module("guidance_embedder", *guidance_embedder);
  }
  register_module("text_embedder", text_embedder);
}

Tensor TimeTextEmbedding::forward(const Tensor& t, const Tensor& g, const Tensor& pooled) {
  const TimestepSinusoid sinusoid{256, /*flip_sin_to_cos=*/true, /*downscale_freq_shift=*/0.0, 1.0, 10000.0};
  const DType dt = pooled.dtype();
  Tensor temb = timestep_embedder(timestep_embedding(t, sinusoid).to(dt));  // [B, D]
  if (guidance_embedder) {
    check(g.defined(), "flux", "the model has a guidance embedder (guidance_embeds) but no guidance was given");
    temb = ops::add(temb, (*guidance_embedder)(timestep_embedding(g, sinusoid).to(dt)));  // [B, D]
  }
  return ops::add(temb, text_embedder(pooled));  // [B, D]
}

// ---------------------------------------------------------------- norms, feed-forward

AdaNorm::AdaNorm(std::string type_name, int64_t dim, int64_t n)
    : Module(std::move(type_name)), chunks(n), linear(dim, n * dim) {
  register_module("linear", linear);
}

std::vector<Tensor> AdaNorm::modulation(const Tensor& temb) {
  if (plan) {
    const Tensor rows = plan->rows(this, temb, [&](const Tensor& stacked) { return linear(ops::silu(stacked)); });
    if (rows.defined()) return rows.chunk(chunks, 1);  // chunks x [B, D]
  }
  return linear(ops::silu(temb)).chunk(chunks, 1);  // chunks x [B, D]
}

Tensor AdaNorm::norm(const Tensor& x) const { return ops::layer_norm(x, {}, {}, kNormEps); }  // [B, S, D]

FeedForward::FeedForward(int64_t dim) : Module("FeedForward"), net(dim) { register_module("net", net); }

Tensor FeedForward::forward(const Tensor& x) {
  return net.out(net.gelu.proj.with_gelu_tanh(x));  // GELU(tanh) of the projection, then out: [B, S, D]
}

// ---------------------------------------------------------------- attention

FluxAttention::FluxAttention(int64_t h, int64_t hd, bool joint, bool pre_only)
    : Module("FluxAttention"), heads(h), head_dim(hd), to_q(h * hd, h * hd), to_k(h * hd, h * hd),
      to_v(h * hd, h * hd), norm_q(hd, kNormEps), norm_k(hd, kNormEps) {
  const int64_t D = h * hd;
  register_module("norm_q", norm_q);
  register_module("norm_k", norm_k);
  register_module("to_q", to_q);
  register_module("to_k", to_k);
  register_module("to_v", to_v);
  if (!pre_only) {
    to_out.push_back(std::make_unique<Linear>(D, D));
    register_module("to_out", to_out);
  }
  if (joint) {
    norm_added_q = std::make_unique<RMSNorm>(hd, kNormEps);
    norm_added_k = std::make_unique<RMSNorm>(hd, kNormEps);
    add_q_proj = std::make_unique<Linear>(D, D);
    add_k_proj = std::make_unique<Linear>(D, D);
    add_v_proj = std::make_unique<Linear>(D, D);
    to_add_out = std::make_unique<Linear>(D, D);
    register_module("norm_added_q", *norm_added_q);
    register_module("norm_added_k", *norm_added_k);
    register_module("add_q_proj", *add_q_proj);
    register_module("add_k_proj", *add_k_proj);
    register_module("add_v_proj", *add_v_proj);
    register_module("to_add_out", *to_add_out);
  }
}

Tensor FluxAttention::heads_of(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads, head_dim});  // [B, S, H, Dh]
}

Tensor FluxAttention::heads_attention(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const Tensor q = rms_norm_rope({&norm_q}, {heads_of(to_q(x))}, cos, sin);        // [B, S, H, Dh]
  const Tensor k = rms_norm_rope({&norm_k}, {heads_of(to_k(x))}, cos, sin);        // [B, S, H, Dh]
  const Tensor v = heads_of(to_v(x));                                              // [B, S, H, Dh]
  return ops::sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));      // [B, H, S, Dh]
}

Tensor FluxAttention::self_attention(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t B = x.size(0), S = x.size(1);
  Tensor out = heads_attention(x, cos, sin).transpose(1, 2).reshape({B, S, heads * head_dim});  // [B, S, D]
  return to_out.size() ? to_out[0](out) : out;
}

std::pair<Tensor, Tensor> FluxAttention::joint_attention(const Tensor& img, const Tensor& txt, const Tensor& cos,
                                                         const Tensor& sin) {
  check(add_q_proj != nullptr, "flux", "joint attention on a single-stream attention module");
  const int64_t B = img.size(0), N = img.size(1), T = txt.size(1);
  // Text first, then image, along the sequence: each stream's norm, then RoPE over the joint sequence.
  const Tensor qr = rms_norm_rope({norm_added_q.get(), &norm_q}, {heads_of((*add_q_proj)(txt)), heads_of(to_q(img))},
                                  cos, sin);  // [B, T+N, H, Dh]
  const Tensor kr = rms_norm_rope({norm_added_k.get(), &norm_k}, {heads_of((*add_k_proj)(txt)), heads_of(to_k(img))},
                                  cos, sin);  // [B, T+N, H, Dh]
  const Tensor v = ops::concat({heads_of((*add_v_proj)(txt)), heads_of(to_v(img))}, 1);  // [B, T+N, H, Dh]
  const Tensor o = ops::sdpa(qr.transpose(1, 2), kr.transpose(1, 2), v.transpose(1, 2));  // [B, H, T+N, Dh]
  const Tensor out = o.transpose(1, 2).reshape({B, T + N, heads * head_dim});            // [B, T+N, D]
  const Tensor txt_out = (*to_add_out)(out.slice(1, 0, T));                              // [B, T, D]
  const Tensor img_out = to_out[0](out.slice(1, T, T + N));                              // [B, N, D]
  return {img_out, txt_out};
}

// ---------------------------------------------------------------- blocks

FluxTransformerBlock::FluxTransformerBlock(int64_t heads, int64_t head_dim)
    : Module("FluxTransformerBlock"), norm1("AdaLayerNormZero", heads * head_dim, 6),
      norm1_context("AdaLayerNormZero", heads * head_dim, 6), attn(heads, head_dim, true, false),
      ff(heads * head_dim), ff_context(heads * head_dim) {
  register_module("norm1", norm1);
  register_module("norm1_context", norm1_context);
  register_module("attn", attn);
  register_module("ff", ff);
  register_module("ff_context", ff_context);
}

std::pair<Tensor, Tensor> FluxTransformerBlock::forward(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                                        const Tensor& cos, const Tensor& sin) {
  // (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp), each [B, D]
  const std::vector<Tensor> m = norm1.modulation(temb), c = norm1_context.modulation(temb);
  const Tensor x_hat = modulate(norm1.norm(img), m[0], m[1]);          // [B, N, D]
  const Tensor c_hat = modulate(norm1_context.norm(txt), c[0], c[1]);  // [B, T, D]
  Tensor attn_img, attn_txt;
  if (attn.output_hook) {  // step caching (TaylorSeer): the attn module's outputs (image, text)
    const auto o = attn.output_hook(attn.hook_id, [&] {
      auto [a, b] = attn.joint_attention(x_hat, c_hat, cos, sin);
      return std::vector<Tensor>{a, b};
    });
    attn_img = o[0];
    attn_txt = o[1];
  } else {
    std::tie(attn_img, attn_txt) = attn.joint_attention(x_hat, c_hat, cos, sin);
  }

  Tensor x = gated_add(img, m[2], attn_img);                                             // [B, N, D]
  x = gated_add(x, m[5], ff(modulate(norm1.norm(x), m[3], m[4])));                         // [B, N, D]
  Tensor e = gated_add(txt, c[2], attn_txt);                                             // [B, T, D]
  e = gated_add(e, c[5], ff_context(modulate(norm1_context.norm(e), c[3], c[4])));         // [B, T, D]
  return {clip_if_f16(e), x};
}

Tensor FluxTransformerBlock::modulated_input(const Tensor& img, const Tensor& temb) {
  return call([&] {
    const std::vector<Tensor> m = norm1.modulation(temb);
    return modulate(norm1.norm(img), m[0], m[1]);  // [B, N, D]
  });
}

FluxSingleTransformerBlock::FluxSingleTransformerBlock(int64_t heads, int64_t head_dim)
    : Module("FluxSingleTransformerBlock"), norm("AdaLayerNormZeroSingle", heads * head_dim, 3),
      proj_mlp(heads * head_dim, 4 * heads * head_dim), proj_out(5 * heads * head_dim, heads * head_dim),
      attn(heads, head_dim, false, true) {
  register_module("norm", norm);
  register_module("proj_mlp", proj_mlp);
  register_module("proj_out", proj_out);
  register_module("attn", attn);
}

std::pair<Tensor, Tensor> FluxSingleTransformerBlock::forward(const Tensor& img, const Tensor& txt,
                                                              const Tensor& temb, const Tensor& cos,
                                                              const Tensor& sin) {
  const int64_t T = txt.size(1), S = T + img.size(1);
  const Tensor h = ops::concat({txt, img}, 1);                                   // [B, S, D]
  const std::vector<Tensor> m = norm.modulation(temb);                           // shift, scale, gate [B, D]
  const Tensor h_hat = modulate(norm.norm(h), m[0], m[1]);                       // [B, S, D]
  Tensor joined;                                                                 // cat([attention, MLP], -1): [B, S, 5D]
  if (!attn.output_hook && !CaptureHook::current()) {
    // Eager: the MLP and the attention's heads written into their columns of one buffer, which proj_out reads:
    // no concat copying the MLP's 4D columns, no separate copy of the heads (the same values).
    const int64_t B = h.size(0), D = h.size(2);
    joined = Tensor::empty({B, S, 5 * D}, h_hat.dtype(), h_hat.device());
    proj_mlp.forward_into(h_hat, joined.slice(2, D, 5 * D), /*gelu=*/true);  // GELU(tanh): [B, S, 4D]
    const Tensor o = attn.heads_attention(h_hat, cos, sin);                 // [B, H, S, Dh]
    ops::copy_into(o.transpose(1, 2), joined.slice(2, 0, D).view({B, S, attn.heads, attn.head_dim}));
  } else {
    const Tensor mlp = proj_mlp.with_gelu_tanh(h_hat);  // GELU(tanh): [B, S, 4D]
    const Tensor a = attn.output_hook ? attn.output_hook(attn.hook_id, [&] {
      return std::vector<Tensor>{attn.self_attention(h_hat, cos, sin)};
    })[0] : attn.self_attention(h_hat, cos, sin);  // [B, S, D]
    joined = ops::concat({a, mlp}, 2);
  }
  const Tensor out = proj_out(joined);                                           // [B, S, D]
  const Tensor y = clip_if_f16(gated_add(h, m[2], out));                         // [B, S, D]
  return {y.slice(1, 0, T), y.slice(1, T, S)};
}

// ---------------------------------------------------------------- RoPE

std::pair<Tensor, Tensor> flux_rope_tables(const Tensor& ids, const std::vector<int64_t>& axes_dims, double theta) {
  check(ids.dim() == 2 && ids.size(1) == int64_t(axes_dims.size()), "flux", "rope ids must be [S, ",
        axes_dims.size(), "], got ", ids.str());
  const int64_t S = ids.size(0);
  int64_t D = 0;
  for (int64_t d : axes_dims) D += d;
  // pos = ids.float(); freqs in float64; cos/sin computed in float64, then float32.
  const std::vector<double> pos = ids.to(Device::cpu()).to(DType::f32).to_f64_vector();
  std::vector<float> cos(size_t(S * D)), sin(size_t(S * D));
  int64_t col = 0;
  for (size_t axis = 0; axis < axes_dims.size(); ++axis) {
    const int64_t d = axes_dims[axis];
    for (int64_t k = 0; k < d / 2; ++k) {
      const double freq = 1.0 / std::pow(theta, double(2 * k) / double(d));
      for (int64_t s = 0; s < S; ++s) {
        const double angle = pos[size_t(s * int64_t(axes_dims.size()) + int64_t(axis))] * freq;
        const float c = float(std::cos(angle)), sn = float(std::sin(angle));
        const size_t i = size_t(s * D + col + 2 * k);
        cos[i] = cos[i + 1] = c;  // repeated in place: (c0, c0, c1, c1, ...)
        sin[i] = sin[i + 1] = sn;
      }
    }
    col += d;
  }
  const Device dev = ids.device();
  return {Tensor::from_vector(cos, {S, D}).to(dev), Tensor::from_vector(sin, {S, D}).to(dev)};
}

// ---------------------------------------------------------------- model

FluxTransformer2DModel::FluxTransformer2DModel(const FluxTransformerConfig& cfg)
    : Module("FluxTransformer2DModel"), config(cfg),
      time_text_embed(cfg.inner_dim(), cfg.pooled_projection_dim, cfg.guidance_embeds),
      context_embedder(cfg.joint_attention_dim, cfg.inner_dim()), x_embedder(cfg.in_channels, cfg.inner_dim()),
      norm_out("AdaLayerNormContinuous", cfg.inner_dim(), 2),
      proj_out(cfg.inner_dim(), cfg.patch_size * cfg.patch_size * cfg.out_channels) {
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    transformer_blocks.push_back(std::make_unique<FluxTransformerBlock>(cfg.num_attention_heads, cfg.attention_head_dim));
  for (int64_t i = 0; i < cfg.num_single_layers; ++i)
    single_transformer_blocks.push_back(
        std::make_unique<FluxSingleTransformerBlock>(cfg.num_attention_heads, cfg.attention_head_dim));
  register_module("time_text_embed", time_text_embed);
  register_module("context_embedder", context_embedder);
  register_module("x_embedder", x_embedder);
  register_module("transformer_blocks", transformer_blocks);
  register_module("single_transformer_blocks", single_transformer_blocks);
  register_module("norm_out", norm_out);
  register_module("proj_out", proj_out);
  for (auto& b : transformer_blocks) b->norm1.plan = b->norm1_context.plan = step_plan_;
  for (auto& b : single_transformer_blocks) b->norm.plan = step_plan_;
  norm_out.plan = step_plan_;
}

std::unique_ptr<FluxTransformer2DModel> FluxTransformer2DModel::from_pretrained(const std::filesystem::path& dir,
                                                                                const LoadOptions& opt) {
  const auto cfg_path = dir / "config.json";
  std::ifstream f(cfg_path);
  check(bool(f), "flux", "cannot open ", cfg_path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("flux", cfg_path.string(), ": invalid JSON: ", e.what());
  }
  auto model = std::make_unique<FluxTransformer2DModel>(
      FluxTransformerConfig::from_json(io::JsonConfig(std::move(j), cfg_path.string())));
  LoadOptions o = opt;
  if (o.source.empty()) o.source = dir.string();
  load_state_dict(*model, io::load_weight_files(io::find_weight_files(dir)), o);
  return model;
}

Tensor FluxTransformer2DModel::forward(const Tensor& hidden, const Tensor& encoder, const Tensor& pooled,
                                       const Tensor& timestep, const Tensor& guidance, const Tensor& txt_ids,
                                       const Tensor& img_ids, FluxIntermediates* mids) {
  const FluxTransformerConfig& c = config;
  check(hidden.dim() == 3 && hidden.size(2) == c.in_channels, "flux", "hidden_states must be [B, N, ",
        c.in_channels, "], got ", hidden.str());
  const int64_t B = hidden.size(0), N = hidden.size(1);
  check(encoder.dim() == 3 && encoder.size(0) == B && encoder.size(2) == c.joint_attention_dim, "flux",
        "encoder_hidden_states must be [", B, ", T, ", c.joint_attention_dim, "], got ", encoder.str());
  const int64_t T = encoder.size(1);
  check(pooled.dim() == 2 && pooled.size(0) == B && pooled.size(1) == c.pooled_projection_dim, "flux",
        "pooled_projections must be [", B, ", ", c.pooled_projection_dim, "], got ", pooled.str());
  check(timestep.dim() == 1 && timestep.size(0) == B, "flux", "timestep must be [", B, "], got ", timestep.str());
  check(!guidance.defined() || (guidance.dim() == 1 && guidance.size(0) == B), "flux", "guidance must be [", B,
        "], got ", guidance.str());
  check(!guidance.defined() || c.guidance_embeds, "flux",
        "guidance given but the model has no guidance embedder (guidance_embeds false)");
  check(txt_ids.dim() == 2 && txt_ids.size(0) == T, "flux", "txt_ids must be [", T, ", 3], got ", txt_ids.str());
  check(img_ids.dim() == 2 && img_ids.size(0) == N, "flux", "img_ids must be [", N, ", 3], got ", img_ids.str());
  // RoPE tables from the ids, eagerly (they read the ids' values, so they stay outside a compiled graph),
  // cached by the ids' values: the same every step of a generation.
  const Tensor ids = ops::concat({txt_ids.to(DType::f32), img_ids.to(DType::f32)}, 0);  // [T+N, 3]
  const auto [cos, sin] = rope_cache_->get(ids.to_f64_vector(), ids.device(), [&] {
    return flux_rope_tables(ids, c.axes_dims_rope);  // [T+N, Dh] each
  });
  if (mids) {
    (*mids)["rope.0"] = cos;
    (*mids)["rope.1"] = sin;
  }
  if (compiled_ && !mids && !step_cache_) return compiled_->run(*this, {hidden, encoder, pooled, timestep, guidance, cos, sin})[0];
  return forward_body(hidden, encoder, pooled, timestep, guidance, cos, sin, mids);
}

Tensor FluxTransformer2DModel::forward_body(const Tensor& hidden, const Tensor& encoder, const Tensor& pooled,
                                            const Tensor& timestep, const Tensor& guidance, const Tensor& cos,
                                            const Tensor& sin, FluxIntermediates* mids) {
  const auto record = [&](const std::string& name, const Tensor& t) {
    if (mids) (*mids)[name] = t;
  };

  const DType dt = compute_dtype();
  Tensor x = x_embedder(hidden.to(dt));  // [B, N, D]
  record("x_embedder", x);
  // The pipeline passes t/1000; the model scales back in its compute dtype (Diffusers: .to(dtype) * 1000).
  const Tensor g = guidance.defined() ? ops::mul_scalar(guidance.to(dt), 1000.0) : Tensor();  // [B]
  const auto embed = [&](const Tensor& ts) {  // ts [B] -> temb [B, D]
    return time_text_embed(ops::mul_scalar(ts.to(dt), 1000.0), g, pooled.to(dt));
  };
  // A planned step's temb comes from the plan (its window's steps embedded by `embed` each, at the window's
  // first call), so that the norms' modulation linears run once per window (step_modulation_plan.h).
  Tensor temb;
  if (step_plan_->active() && !timestep.is_symbolic()) {
    std::vector<float> cond = g.defined() ? g.to_f32_vector() : std::vector<float>();
    const std::vector<float> p = pooled.to_f32_vector();
    cond.insert(cond.end(), p.begin(), p.end());
    temb = step_plan_->temb(timestep, cond, embed);
  }
  if (!temb.defined()) temb = embed(timestep);  // [B, D]
  record("temb", temb);
  Tensor e = context_embedder(encoder.to(dt));  // [B, T, D]
  record("context_embedder", e);

  // Block i of the loop (transformer_blocks, then single_transformer_blocks) on the streams.
  const int64_t L = int64_t(transformer_blocks.size()), nb = L + int64_t(single_transformer_blocks.size());
  const auto run_blocks = [&](int64_t begin, int64_t end, const cache::Streams& in) {
    Tensor x = in.x, e = in.e;
    for (int64_t i = begin; i < end; ++i) {
      if (i < L) {
        std::tie(e, x) = transformer_blocks[size_t(i)](x, e, temb, cos, sin);  // [B, T, D], [B, N, D]
        record("transformer_blocks." + std::to_string(i) + ".0", e);
        record("transformer_blocks." + std::to_string(i) + ".1", x);
        continue;
      }
      const int64_t j = i - L;
      if (j == 0 && single_transformer_blocks[0].compiled && e.size(0) == 1) {
        // Regional compilation: the first single block's inputs become slices of one buffer, as every later
        // block's are (the previous block's output), so that each block's cat([txt, img]) is a view of its
        // inputs' buffer instead of a copy (compile: Node::alias_inputs). The same values. (With a batch of
        // several the slices are not contiguous and the compiled blocks copy their inputs anyway.)
        const int64_t T = e.size(1);
        const Tensor joint = ops::concat({e, x}, 1);  // [B, T + N, D]
        e = joint.slice(1, 0, T);
        x = joint.slice(1, T, joint.size(1));
      }
      std::tie(e, x) = single_transformer_blocks[size_t(j)](x, e, temb, cos, sin);
      record("single_transformer_blocks." + std::to_string(j) + ".0", e);
      record("single_transformer_blocks." + std::to_string(j) + ".1", x);
    }
    return cache::Streams{x, e};
  };
  // With a step cache the cache decides which ranges of the loop run (cache/step_cache.h).
  const auto modulated = [&](const Tensor& xin) { return transformer_blocks[0].modulated_input(xin, temb); };
  const cache::Streams out = step_cache_ && nb > 0
                                 ? step_cache_->run_blocks({x, e}, run_blocks, L > 0 ? cache::ModulatedInput(modulated)
                                                                                     : cache::ModulatedInput())
                                 : run_blocks(0, nb, {x, e});
  x = out.x;

  const std::vector<Tensor> m = norm_out.modulation(temb);  // (scale, shift) in THIS order, [B, D] each
  x = modulate(norm_out.norm(x), m[1], m[0]);                // [B, N, D]
  record("norm_out", x);
  return proj_out(x);  // [B, N, patch^2 * out]
}

// ---------------------------------------------------------------- compile

namespace {
compile::ForwardFn double_block_fn() {
  return [](Module& m, const std::vector<Tensor>& in) {
    auto [e, x] = static_cast<FluxTransformerBlock&>(m).forward(in[0], in[1], in[2], in[3], in[4]);
    return std::vector<Tensor>{e, x};
  };
}
compile::ForwardFn single_block_fn() {
  return [](Module& m, const std::vector<Tensor>& in) {
    auto [e, x] = static_cast<FluxSingleTransformerBlock&>(m).forward(in[0], in[1], in[2], in[3], in[4]);
    return std::vector<Tensor>{e, x};
  };
}
}  // namespace

std::pair<Tensor, Tensor> FluxTransformerBlock::run_compiled(const Tensor& img, const Tensor& txt, const Tensor& temb,
                                                             const Tensor& cos, const Tensor& sin) {
  const auto out = compiled->run(*this, {img, txt, temb, cos, sin});
  return {out[0], out[1]};
}

std::pair<Tensor, Tensor> FluxSingleTransformerBlock::run_compiled(const Tensor& img, const Tensor& txt,
                                                                   const Tensor& temb, const Tensor& cos,
                                                                   const Tensor& sin) {
  const auto out = compiled->run(*this, {img, txt, temb, cos, sin});
  return {out[0], out[1]};
}

void FluxTransformer2DModel::compile(const compile::CompileOptions& o) {
  uncompile();
  compiled_ = std::make_shared<compile::CompiledModule>(
      [](Module& m, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            static_cast<FluxTransformer2DModel&>(m).forward_body(in[0], in[1], in[2], in[3], in[4], in[5], in[6])};
      },
      o);
}

void FluxTransformer2DModel::compile_repeated_blocks(const compile::CompileOptions& o) {
  uncompile();
  auto dbl = std::make_shared<compile::CompiledModule>(double_block_fn(), o);
  auto sgl = std::make_shared<compile::CompiledModule>(single_block_fn(), o);
  for (auto& b : transformer_blocks) b->compiled = dbl;
  for (auto& b : single_transformer_blocks) b->compiled = sgl;
}

void FluxTransformer2DModel::uncompile() {
  compiled_.reset();
  for (auto& b : transformer_blocks) b->compiled.reset();
  for (auto& b : single_transformer_blocks) b->compiled.reset();
}

void FluxTransformer2DModel::enable_cache(const CacheOptions& opt, const std::string& model_name) {
  disable_cache();
  std::vector<std::string> names;
  for (size_t i = 0; i < transformer_blocks.size(); ++i) names.push_back("transformer_blocks." + std::to_string(i));
  for (size_t i = 0; i < single_transformer_blocks.size(); ++i)
    names.push_back("single_transformer_blocks." + std::to_string(i));
  step_cache_ = cache::make_step_cache(opt, model_name, names, /*is_flux=*/true);
  if (!step_cache_) return;
  if (auto hook = step_cache_->attention_hook()) {
    int64_t id = 0;
    for (auto& b : transformer_blocks) b->attn.output_hook = hook, b->attn.hook_id = id++;
    for (auto& b : single_transformer_blocks) b->attn.output_hook = hook, b->attn.hook_id = id++;
  }
}

void FluxTransformer2DModel::disable_cache() {
  step_cache_.reset();
  for (auto& b : transformer_blocks) b->attn.output_hook = nullptr;
  for (auto& b : single_transformer_blocks) b->attn.output_hook = nullptr;
}

std::vector<const compile::CompiledModule*> FluxTransformer2DModel::compiled_modules() const {
  std::vector<const compile::CompiledModule*> out;
  if (compiled_) out.push_back(compiled_.get());
  if (transformer_blocks.size() && transformer_blocks[0].compiled) out.push_back(transformer_blocks[0].compiled.get());
  if (single_transformer_blocks.size() && single_transformer_blocks[0].compiled)
    out.push_back(single_transformer_blocks[0].compiled.get());
  return out;
}

}  // namespace diffq::models::flux
