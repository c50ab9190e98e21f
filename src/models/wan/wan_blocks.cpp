#include "models/wan/wan_blocks.h"

#include "compile/compiled_module.h"
#include "diffq/error.h"
#include "models/common/timestep_embedding.h"
#include "ops/ops.h"

namespace diffq::models::wan {

// ---------------------------------------------------------------- patch embedding

PatchConv3d::PatchConv3d(int64_t in, int64_t out, int64_t t, int64_t h, int64_t w)
    : Module("Conv3d"), in_channels(in), out_channels(out), pt(t), ph(h), pw(w), weight({out, in, t, h, w}),
      bias({out}) {
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor PatchConv3d::forward(const Tensor& x) {
  check(x.dim() == 5 && x.size(1) == in_channels, "wan", "patch_embedding expects [B, ", in_channels,
        ", F, H, W], got ", x.str());
  const int64_t B = x.size(0), F = x.size(2), H = x.size(3), W = x.size(4);
  check(F % pt == 0 && H % ph == 0 && W % pw == 0, "wan", "latent size F x H x W = ", F, "x", H, "x", W,
        " is not a multiple of patch_size (", pt, ", ", ph, ", ", pw, ")");
  const int64_t f = F / pt, h = H / ph, w = W / pw, K = in_channels * pt * ph * pw;
  // [B, C, f, pt, h, ph, w, pw] -> [B, f, h, w, C, pt, ph, pw] -> [B, f*h*w, C*pt*ph*pw]
  const Tensor patches = x.view({B, in_channels, f, pt, h, ph, w, pw})
                             .permute({0, 2, 4, 6, 1, 3, 5, 7})
                             .reshape({B, f * h * w, K});
  check(!weight.is_quantized(), "wan", "patch_embedding.weight is quantized; only Linear weights can be");
  return ops::linear(patches, weight.dense().reshape({out_channels, K}), bias.dense());  // [B, N, out]
}

// ---------------------------------------------------------------- condition embedder

TimestepEmbedding::TimestepEmbedding(int64_t in, int64_t dim)
    : Module("TimestepEmbedding"), linear_1(in, dim), linear_2(dim, dim) {
  register_module("linear_1", linear_1);
  register_module("linear_2", linear_2);
}

Tensor TimestepEmbedding::forward(const Tensor& x) { return linear_2(ops::silu(linear_1(x))); }

TextProjection::TextProjection(int64_t in, int64_t dim)
    : Module("PixArtAlphaTextProjection"), linear_1(in, dim), linear_2(dim, dim) {
  register_module("linear_1", linear_1);
  register_module("linear_2", linear_2);
}

Tensor TextProjection::forward(const Tensor& x) { return linear_2(linear_1.with_gelu_tanh(x)); }

WanConditionEmbedder::WanConditionEmbedder(int64_t d, int64_t fd, int64_t text_dim)
    : Module("WanTimeTextImageEmbedding"), dim(d), freq_dim(fd), time_embedder(fd, d), time_proj(d, 6 * d),
      text_embedder(text_dim, d) {
  register_module("time_embedder", time_embedder);
  register_module("time_proj", time_proj);
  register_module("text_embedder", text_embedder);
}

WanConditionEmbedder::Out WanConditionEmbedder::forward(const Tensor& timestep, const Tensor& text, DType dt) {
  const int64_t B = timestep.size(0), L = timestep.dim() == 2 ? timestep.size(1) : 1;
  const Tensor t = timestep.reshape({B * L});  // [B*L] (Diffusers flattens per-token timesteps)
  const Tensor sinusoid = timestep_embedding(t, {freq_dim, /*flip_sin_to_cos=*/true, /*shift=*/0.0});  // [B*L, F] f32
  // The sinusoid goes in at the time embedder's own dtype (float32 when kept); temb then takes the
  // dtype of the text states (Diffusers: .type_as(encoder_hidden_states)).
  const DType te_dt = time_embedder.linear_1.bias.dtype();
  const Tensor temb = time_embedder(sinusoid.to(te_dt)).to(dt);  // [B*L, D]
  const Tensor proj = time_proj(ops::silu(temb));                // [B*L, 6D]
  return {temb.view({B, L, dim}), proj.view({B, L, 6, dim}), text_embedder(text)};
}

// ---------------------------------------------------------------- attention, feed-forward

WanAttention::WanAttention(int64_t dim, int64_t h, int64_t hd, double eps)
    : Module("WanAttention"), heads(h), head_dim(hd), to_q(dim, h * hd), to_k(dim, h * hd),
      to_v(dim, h * hd), norm_q(h * hd, eps), norm_k(h * hd, eps) {
  register_module("to_q", to_q);
  register_module("to_k", to_k);
  register_module("to_v", to_v);
  to_out.push_back(std::make_unique<Linear>(h * hd, dim));
  register_module("to_out", to_out);
  register_module("norm_q", norm_q);
  register_module("norm_k", norm_k);
}

Tensor WanAttention::forward(const Tensor& x, const Tensor& context, const Tensor& cos, const Tensor& sin) {
  const int64_t B = x.size(0), N = x.size(1), S = context.size(1);
  const Tensor q = norm_q(to_q(x));        // [B, N, H*Dh], RMSNorm across all heads before the split
  const Tensor k = norm_k(to_k(context));  // [B, S, H*Dh]
  Tensor qh = q.view({B, N, heads, head_dim});                    // [B, N, H, Dh]
  Tensor kh = k.view({B, S, heads, head_dim});                    // [B, S, H, Dh]
  const Tensor vh = to_v(context).view({B, S, heads, head_dim});  // [B, S, H, Dh]
  if (cos.defined()) {
    qh = ops::rope(qh, cos, sin);
    kh = ops::rope(kh, cos, sin);
  }
  const Tensor o = ops::sdpa(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2));  // [B, H, N, Dh]
  return to_out[0](o.transpose(1, 2).reshape({B, N, heads * head_dim}));                   // [B, N, D]
}

WanFeedForward::WanFeedForward(int64_t dim, int64_t inner) : Module("FeedForward"), net(dim, inner) {
  register_module("net", net);
}

Tensor WanFeedForward::forward(const Tensor& x) {
  return net.out(net.gelu.proj.with_gelu_tanh(x));  // GELU(tanh) of the projection, then out: [B, N, D]
}

// ---------------------------------------------------------------- block

Tensor modulated_layer_norm(const Tensor& h, const Tensor& shift, const Tensor& scale, double eps, DType dt) {
  const Tensor one_plus_scale = ops::add_scalar(scale, 1.0);                           // [B, L, D] f32
  // (h in dt or float32: the norm's result is not rounded to h's dtype before dt's)
  if (shift.size(0) * shift.size(1) == 1 && (h.dtype() == dt || h.dtype() == DType::f32)) {
    const int64_t D = shift.size(2);
    return ops::layer_norm(h, one_plus_scale.reshape({D}), shift.reshape({D}), eps).to(dt);  // [B, N, D]
  }
  const Tensor n = ops::layer_norm(h.to(DType::f32), {}, {}, eps);                     // [B, N, D] f32
  return ops::mul_add(n, one_plus_scale, shift, dt);  // (n * (1 + scale) + shift) in f32, one rounding: [B, N, D]
}

WanTransformerBlock::WanTransformerBlock(int64_t dim, int64_t ffn_dim, int64_t heads, bool can, double e)
    : Module("WanTransformerBlock"), eps(e), cross_attn_norm(can), attn1(dim, heads, dim / heads, e),
      attn2(dim, heads, dim / heads, e), ffn(dim, ffn_dim), scale_shift_table({1, 6, dim}) {
  register_module("attn1", attn1);
  register_module("attn2", attn2);
  if (cross_attn_norm) {
    norm2 = std::make_unique<LayerNorm>(dim, eps);
    norm2->fp32 = true;
    register_module("norm2", *norm2);
  }
  register_module("ffn", ffn);
  register_parameter("scale_shift_table", scale_shift_table);
}

Tensor WanTransformerBlock::forward(const Tensor& x, const Tensor& text, const Tensor& timestep_proj,
                                    const Tensor& cos, const Tensor& sin) {
  const DType dt = x.dtype(), f32 = DType::f32;
  const int64_t D = x.size(2);
  // (shift, scale, gate, c_shift, c_scale, c_gate) = scale_shift_table + timestep_proj, in float32.
  const Tensor table = scale_shift_table.dense().to(f32).view({1, 1, 6, D});    // [1, 1, 6, D]
  const Tensor mod = ops::add(table, timestep_proj.to(f32));                    // [B, L, 6, D] f32
  const auto m = [&](int64_t i) { return mod.select(2, i); };                   // [B, L, D]
  const auto modulated = [&](const Tensor& h, int64_t shift, int64_t scale) {
    return modulated_layer_norm(h, m(shift), m(scale), eps, dt);                        // [B, N, D]
  };
  // (h.float() + o.float() * gate) back to the compute dtype in one op: the float32 product and sum of the
  // exactly widened values, rounded once.
  const auto gated_residual = [&](const Tensor& h, const Tensor& o, int64_t gate) {
    return ops::mul_add(m(gate), o, h, dt);                                              // [B, N, D]
  };

  // 1. self-attention with RoPE; gated residual in float32
  const Tensor h1 = modulated(x, 0, 1);                                                  // [B, N, D]
  const Tensor a1 = attn1(h1, h1, cos, sin);                                             // [B, N, D]
  Tensor y = gated_residual(x, a1, 2);                                                   // [B, N, D]

  // 2. cross-attention to the text (no RoPE, no gate); norm2 = FP32LayerNorm with affine or Identity
  Tensor h2 = y;
  if (norm2) h2 = (*norm2)(y);  // called as a module, so its hooks (leaf-level group offloading) run
  y = ops::add(y, attn2(h2, text, Tensor(), Tensor()));                                  // [B, N, D]

  // 3. feed-forward; gated residual in float32
  const Tensor f = ffn(modulated(y, 3, 4));                                              // [B, N, D]
  return gated_residual(y, f, 5);                                                        // [B, N, D]
}

Tensor WanTransformerBlock::run_compiled(const Tensor& x, const Tensor& text, const Tensor& timestep_proj,
                                         const Tensor& cos, const Tensor& sin) {
  return compiled->run(*this, {x, text, timestep_proj, cos, sin})[0];
}

}  // namespace diffq::models::wan
