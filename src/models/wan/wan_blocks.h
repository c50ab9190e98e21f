// The parts of Diffusers' WanTransformer3DModel (0.42.1, transformer_wan.py) below the model: the
// patch embedding, the condition embedder, attention and the transformer block. Module and parameter
// names equal Diffusers' state-dict keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "modules/layers.h"

namespace diffq::compile {
class CompiledModule;
}

namespace diffq::models::wan {

// nn.Conv3d with kernel = stride = patch (no padding), run as a patchify reshape and one GEMM:
// [B, C, F, H, W] -> [B, F/pt * H/ph * W/pw, out] with tokens in (f, h, w) order and each patch
// flattened as (c, pt, ph, pw), the order of the conv weight [out, C, pt, ph, pw].
class PatchConv3d : public Module {
 public:
  PatchConv3d(int64_t in_channels, int64_t out_channels, int64_t pt, int64_t ph, int64_t pw);
  Tensor operator()(const Tensor& x) { return call1(x, &PatchConv3d::forward); }
  Tensor forward(const Tensor& x);
  int64_t in_channels, out_channels, pt, ph, pw;
  Parameter weight;  // [out, C, pt, ph, pw]
  Parameter bias;    // [out]
};

// TimestepEmbedding: linear_1 -> SiLU -> linear_2.
class TimestepEmbedding : public Module {
 public:
  TimestepEmbedding(int64_t in, int64_t dim);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [N, in] -> [N, dim]
  Linear linear_1, linear_2;
};

// PixArtAlphaTextProjection(act_fn "gelu_tanh"): linear_1 -> GELU(tanh) -> linear_2.
class TextProjection : public Module {
 public:
  TextProjection(int64_t in, int64_t dim);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, S, in] -> [B, S, dim]
  Linear linear_1, linear_2;
};

// WanTimeTextImageEmbedding without the image embedder (T2V): the sinusoid (freq_dim, cos first),
// time_embedder in its own parameters' dtype (float32 when kept), temb cast to the compute dtype,
// time_proj(SiLU(temb)) -> 6 modulation vectors, and the text projection.
class WanConditionEmbedder : public Module {
 public:
  WanConditionEmbedder(int64_t dim, int64_t freq_dim, int64_t text_dim);
  struct Out {
    Tensor temb;           // [B, L, D] in the compute dtype (L = 1, or tokens with per-token timesteps)
    Tensor timestep_proj;  // [B, L, 6, D] in the compute dtype (Diffusers' unflatten of time_proj)
    Tensor text;           // [B, S, D]
  };
  // timestep [B] or [B, L] (any numeric dtype, read as float32); text [B, S, text_dim] in `dt`.
  Out operator()(const Tensor& timestep, const Tensor& text, DType dt) {
    return call([&] { return forward(timestep, text, dt); });
  }
  Out forward(const Tensor& timestep, const Tensor& text, DType dt);
  int64_t dim, freq_dim;
  TimestepEmbedding time_embedder;
  Linear time_proj;  // [6D, D]
  TextProjection text_embedder;
};

// WanAttention + WanAttnProcessor: q/k RMSNorm over all heads (norm_q/norm_k over H*Dh, before the
// head split; Diffusers builds them whatever the config's qk_norm says), RoPE on q and k for
// self-attention only, SDPA without a mask, to_out.0.
class WanAttention : public Module {
 public:
  WanAttention(int64_t dim, int64_t heads, int64_t head_dim, double eps);
  // x [B, N, D]; context [B, S, D] (cross-attention) or x itself; cos/sin [N, Dh] or undefined (no RoPE).
  Tensor operator()(const Tensor& x, const Tensor& context, const Tensor& cos, const Tensor& sin) {
    return call([&] { return forward(x, context, cos, sin); });
  }
  Tensor forward(const Tensor& x, const Tensor& context, const Tensor& cos, const Tensor& sin);
  int64_t heads, head_dim;
  Linear to_q, to_k, to_v;
  ModuleList<Linear> to_out;  // "to_out.0" (Dropout at .1 has no parameters)
  RMSNorm norm_q, norm_k;     // [H*Dh] (rms_norm_across_heads)
};

// FeedForward(activation "gelu-approximate"): net.0.proj -> GELU(tanh) -> net.2.
class WanFeedForward : public Module {
 public:
  WanFeedForward(int64_t dim, int64_t inner);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, N, D] -> [B, N, D]
  struct Gelu : Module {
    Gelu(int64_t in, int64_t out) : Module("GELU"), proj(in, out) { register_module("proj", proj); }
    Linear proj;
  };
  struct Net : Module {
    Net(int64_t dim, int64_t inner) : Module("ModuleList"), gelu(dim, inner), out(inner, dim) {
      register_module("0", gelu);
      register_module("2", out);
    }
    Gelu gelu;
    Linear out;
  } net;
};

// Diffusers' Wan modulation: (FP32LayerNorm(h.float()) * (1 + scale) + shift).to(dt), shift and scale
// [B, L, D] float32 (one row per batch, or per token). With one row (B = L = 1: one timestep per pass)
// it is layer_norm's own affine epilogue on h: h's values widened exactly, (x - mean) * rstd, * w, + b,
// each rounded to float32, then one rounding to dt: the same operations in the same order (bit for bit:
// tests/models/test_wan_transformer.cpp), in one pass over h instead of five.
Tensor modulated_layer_norm(const Tensor& h, const Tensor& shift, const Tensor& scale, double eps, DType dt);

class WanTransformerBlock : public Module {
 public:
  WanTransformerBlock(int64_t dim, int64_t ffn_dim, int64_t heads, bool cross_attn_norm, double eps);
  // x [B, N, D]; text [B, S, D]; timestep_proj [B, L, 6, D] (L = 1 or N); cos/sin [N, Dh] -> [B, N, D]
  Tensor operator()(const Tensor& x, const Tensor& text, const Tensor& timestep_proj, const Tensor& cos,
                    const Tensor& sin) {
    return call([&] { return compiled ? run_compiled(x, text, timestep_proj, cos, sin)
                                      : forward(x, text, timestep_proj, cos, sin); });
  }
  Tensor forward(const Tensor& x, const Tensor& text, const Tensor& timestep_proj, const Tensor& cos,
                 const Tensor& sin);
  // Set by WanTransformer3DModel::compile_repeated_blocks (one graph shared by every block).
  std::shared_ptr<compile::CompiledModule> compiled;
  Tensor run_compiled(const Tensor& x, const Tensor& text, const Tensor& timestep_proj, const Tensor& cos,
                      const Tensor& sin);
  double eps;
  bool cross_attn_norm;
  // norm1 / norm3: FP32LayerNorm without affine (no parameters); norm2: FP32LayerNorm with affine
  // when cross_attn_norm, else Identity.
  WanAttention attn1, attn2;
  std::unique_ptr<LayerNorm> norm2;
  WanFeedForward ffn;
  Parameter scale_shift_table;  // [1, 6, D]
};

}  // namespace diffq::models::wan
