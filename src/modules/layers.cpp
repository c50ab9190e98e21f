#include "modules/layers.h"

#include "diffq/error.h"
#include "ops/linear_q.h"
#include "ops/ops.h"

namespace diffq {

namespace {
const Tensor& opt(const Parameter& p, bool present) {
  static const Tensor none;
  return present ? p.dense() : none;
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool b)
    : Module("Linear"), in_features(in), out_features(out), weight({out, in}), bias({out}), has_bias(b) {
  register_parameter("weight", weight);
  if (has_bias) register_parameter("bias", bias);
}

// The packed form the linear runs on: the quantized weight, the dense one packed once for this device's GEMM
// (ops/weight_packing.h), or none (the dense linear).
const ops::PackedWeight* Linear::packed_for(const Tensor& x) {
  if (weight.is_quantized()) return &weight.quantized();
  if (weight.pack_for_linear(x) && x.dtype() == weight.dtype()) return &weight.packed();
  return nullptr;
}

Tensor Linear::forward(const Tensor& x) {
  const Tensor& b = opt(bias, has_bias);
  const ops::PackedWeight* w = packed_for(x);
  const Tensor y = w ? ops::linear_q(x, *w, b) : ops::linear(x, weight.dense(), b);
  return adapter ? adapter->apply(x, y) : y;
}

Tensor Linear::with_gelu_tanh(const Tensor& x) {
  if (CaptureHook::current() || adapter) return ops::gelu((*this)(x), /*tanh_approx=*/true);
  return call([&] {
    const ops::PackedWeight* w = packed_for(x);
    if (!w) return ops::gelu(ops::linear(x, weight.dense(), opt(bias, has_bias)), /*tanh_approx=*/true);
    return ops::linear_q_act(x, *w, opt(bias, has_bias), ops::UnaryFn::gelu_tanh);
  });
}

void Linear::forward_into(const Tensor& x, const Tensor& out, bool gelu) {
  check(CaptureHook::current() == nullptr, "Linear", "forward_into is eager only (a compile capture is running)");
  if (adapter) {  // the adapter's term is added to the linear's output first
    ops::copy_into(gelu ? with_gelu_tanh(x) : (*this)(x), out);
    return;
  }
  call([&] {
    const ops::PackedWeight* w = packed_for(x);
    const auto act = gelu ? std::optional<ops::UnaryFn>(ops::UnaryFn::gelu_tanh) : std::nullopt;
    if (w) {
      ops::linear_q_into(x, *w, opt(bias, has_bias), act, out);
    } else {
      const Tensor y = ops::linear(x, weight.dense(), opt(bias, has_bias));
      ops::copy_into(gelu ? ops::gelu(y, /*tanh_approx=*/true) : y, out);
    }
    return 0;  // (call() wants a value)
  });
}

LayerNorm::LayerNorm(int64_t dim, double e, bool elementwise_affine, bool b)
    : Module("LayerNorm"), eps(e), affine(elementwise_affine), has_bias(elementwise_affine && b),
      weight({dim}), bias({dim}) {
  if (affine) register_parameter("weight", weight);
  if (has_bias) register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (fp32) {
    // layer_norm widens x exactly, computes in float32 and rounds once to x's dtype: FP32LayerNorm's
    // x.float() ... .to(x.dtype) without the float32 copies of x and of the result.
    auto wide = [](const Tensor& t) { return t.defined() ? t.to(DType::f32) : t; };
    return ops::layer_norm(x, wide(opt(weight, affine)), wide(opt(bias, has_bias)), eps);
  }
  return ops::layer_norm(x, opt(weight, affine), opt(bias, has_bias), eps);
}

RMSNorm::RMSNorm(int64_t dim, double e, bool elementwise_affine)
    : Module("RMSNorm"), eps(e), affine(elementwise_affine), weight({dim}) {
  if (affine) register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, opt(weight, affine), eps); }

Tensor rms_norm_rope(const std::vector<RMSNorm*>& norms, const std::vector<Tensor>& xs, const Tensor& cos,
                     const Tensor& sin) {
  check(!norms.empty() && norms.size() == xs.size(), "rms_norm_rope", "one norm per segment: ", norms.size(),
        " norms, ", xs.size(), " segments");
  bool fused = CaptureHook::current() == nullptr;
  for (const RMSNorm* n : norms) fused = fused && n->hooks().empty() && n->eps == norms[0]->eps;
  if (!fused) {
    std::vector<Tensor> normed;
    for (size_t i = 0; i < norms.size(); ++i) normed.push_back((*norms[i])(xs[i]));
    return ops::rope(normed.size() == 1 ? normed[0] : ops::concat(normed, 1), cos, sin);
  }
  std::vector<Tensor> ws;
  for (const RMSNorm* n : norms) ws.push_back(opt(n->weight, n->affine));
  return ops::rms_norm_rope(xs, ws, norms[0]->eps, cos, sin);
}

GroupNorm::GroupNorm(int64_t g, int64_t channels, double e, bool a)
    : Module("GroupNorm"), groups(g), eps(e), affine(a), weight({channels}), bias({channels}) {
  if (affine) {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  return ops::group_norm(x, groups, opt(weight, affine), opt(bias, affine), eps, layout);
}

Tensor GroupNorm::forward_silu(const Tensor& x) {
  return ops::group_norm_silu(x, groups, opt(weight, affine), opt(bias, affine), eps, layout);
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool b)
    : Module("Conv2d"), stride(s), padding(p), has_bias(b), weight({out, in, k, k}), bias({out}) {
  register_parameter("weight", weight);
  if (has_bias) register_parameter("bias", bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  return ops::conv2d(x, weight.dense(), opt(bias, has_bias), stride,
                     {padding, padding, padding, padding}, layout);
}

Tensor Conv2d::add_to(const Tensor& residual, const Tensor& x) {
  if (CaptureHook::current()) return ops::add(residual, (*this)(x));
  return call([&] {
    return ops::conv2d_add(x, weight.dense(), opt(bias, has_bias), stride, {padding, padding, padding, padding},
                           residual, layout);
  });
}

Embedding::Embedding(int64_t n, int64_t dim) : Module("Embedding"), weight({n, dim}) {
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) { return ops::embedding(ids, weight.dense()); }

}  // namespace diffq
