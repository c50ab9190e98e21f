// The basic layers, named and shaped as torch.nn's so their parameters load by name.
#pragma once

#include "modules/module.h"
#include "ops/op.h"

namespace diffq {

// A term added to a Linear's output at run time (LoRA, src/lora/lora_linear.h): y = base(x) + adapter(x).
// The adapter is read on every call, never baked into a traced graph: a Linear that has one is an opaque node
// of compiled graphs (compile/capture.cpp), so swapping the adapter's weights needs no recompile.
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual Tensor apply(const Tensor& x, const Tensor& y) = 0;  // x [..., in], y = base(x) [..., out]
  // What apply() would bake into captured device work (compile's reduce-overhead graphs,
  // compile/device_graphs.h): it changes whenever apply's kernels, operands or scales would.
  virtual std::string replay_key() const = 0;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &Linear::forward); }
  Tensor forward(const Tensor& x);  // [..., in] -> [..., out]
  // gelu_tanh(this(x)) (the FFNs' GELU(approximate="tanh")) with the two ops' values: one op where the
  // weight's kernel applies the activation to its output in cache (ops::linear_q_act: packed and int8dq
  // weights on the CPU), else the linear and the unary op (an adapter's term is added before the GELU).
  // While compile captures, the two ops (the linear through operator(), which may record it as an opaque
  // node; compiled graphs fuse the GELU into their GEMM parts themselves).
  Tensor with_gelu_tanh(const Tensor& x);
  // this(x) (gelu: with_gelu_tanh(x)) written into `out`, a view of the result with contiguous rows (the columns
  // of a preallocated concat, ops::linear_q_into): the weight's kernel writes there where it can, else the result
  // is copied in. The same values; eager only (an Error while compile captures).
  void forward_into(const Tensor& x, const Tensor& out, bool gelu = false);
  int64_t in_features, out_features;
  Parameter weight;  // [out, in], dense or quantized
  Parameter bias;    // [out] (undefined shape [] when bias=false)
  bool has_bias;
  std::shared_ptr<LinearAdapter> adapter;  // null: none (set by src/lora)

 private:
  const ops::PackedWeight* packed_for(const Tensor& x);
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, bool elementwise_affine = true, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &LayerNorm::forward); }
  Tensor forward(const Tensor& x);
  double eps;
  bool affine, has_bias;
  bool fp32 = false;  // Diffusers' FP32LayerNorm: x, weight and bias widened to float32, the result in x's dtype
  Parameter weight, bias;
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, bool elementwise_affine = true);
  Tensor operator()(const Tensor& x) { return call1(x, &RMSNorm::forward); }
  Tensor forward(const Tensor& x);
  double eps;
  bool affine;
  Parameter weight;
};

// rope(concat([norms[i](xs[i]), ...], dim 1), cos, sin) (FLUX's q / k: per-head RMSNorms of the text and image
// streams, then RoPE over the joint sequence) as one op, ops::rms_norm_rope (the same values), where no hook is on
// the norms (offloading) and no compile capture runs (compile fuses the ops itself); else those calls and ops.
Tensor rms_norm_rope(const std::vector<RMSNorm*>& norms, const std::vector<Tensor>& xs, const Tensor& cos,
                     const Tensor& sin);

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps, bool affine = true);
  Tensor operator()(const Tensor& x) { return call1(x, &GroupNorm::forward); }
  Tensor forward(const Tensor& x);
  // silu(norm(x)) in one op (ops::group_norm_silu): the VAEs' norm + nonlinearity, the same values.
  Tensor with_silu(const Tensor& x) { return call1(x, &GroupNorm::forward_silu); }
  Tensor forward_silu(const Tensor& x);
  int64_t groups;
  double eps;
  bool affine;
  ops::ImageLayout layout = ops::ImageLayout::channels_first;  // where x's channels are (set by the model)
  Parameter weight, bias;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &Conv2d::forward); }
  Tensor forward(const Tensor& x);
  // residual + this(x) in one op (ops::conv2d_add): the same values as the two ops. While compile
  // captures, the two ops (the conv through operator(), which may record it as an opaque node).
  Tensor add_to(const Tensor& residual, const Tensor& x);
  int64_t stride, padding;
  bool has_bias;
  ops::ImageLayout layout = ops::ImageLayout::channels_first;  // x [N, C, H, W] or [N, H, W, C] (set by the model)
  Parameter weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);
  Tensor operator()(const Tensor& ids) { return call1(ids, &Embedding::forward); }
  Tensor forward(const Tensor& ids);
  Parameter weight;
};

}  // namespace diffq
