// What model code calls. Every function builds an OpCall and goes through ops::dispatch, so each works
// on any backend and is recorded while a trace is active. Shapes follow PyTorch's conventions.
#pragma once

#include <vector>

#include "diffq/tensor.h"
#include "ops/op.h"

namespace diffq::ops {

// ---- layout and dtype ----
Tensor copy(const Tensor& x);                 // contiguous copy
Tensor cast(const Tensor& x, DType dtype);    // rounds as torch's .to(dtype)
Tensor to_device(const Tensor& x, Device d);
// dst[...] = src (torch's dst.copy_(src)): same shape and device, cast to dst's dtype as torch rounds.
// dst may be a view whose rows are contiguous (a slice of a preallocated tensor). Eager only.
void copy_into(const Tensor& src, const Tensor& dst);
// Tensors that are slices laid end to end along dim in one storage come back as the view of their span (the
// same values, no copy; eager calls): the result may share memory with its inputs, as views do.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// torch.repeat_interleave(x, repeats, dim): each slice along `dim` repeated in place (r0, r0, r1, r1, ...).
Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim = 0);

// ---- GEMM ----
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = {});  // x @ w^T + b
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- elementwise (broadcasting; result dtype is a's) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// a * b + c (broadcasting) computed in float32 and rounded once to `out`, as torch's
// (c.float() + a.float() * b.float()).to(out); round_product: a * b rounded to `out` first, as torch's
// c + a * b with every tensor in `out` (two ops, two roundings). One pass, no float32 intermediates.
Tensor mul_add(const Tensor& a, const Tensor& b, const Tensor& c, DType out, bool round_product = false);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor rsub_scalar(const Tensor& x, double s);  // s - x
Tensor pow_scalar(const Tensor& x, double s);
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor unary(const Tensor& x, UnaryFn fn);
inline Tensor silu(const Tensor& x) { return unary(x, UnaryFn::silu); }
inline Tensor gelu(const Tensor& x, bool tanh_approx) {
  return unary(x, tanh_approx ? UnaryFn::gelu_tanh : UnaryFn::gelu_erf);
}
inline Tensor quick_gelu(const Tensor& x) { return unary(x, UnaryFn::quick_gelu); }

// ---- normalisation and attention ----
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);  // w, b optional
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);                      // w optional
// x [N, C, ...], or [N, ..., C] channels-last.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps,
                  ImageLayout layout = ImageLayout::channels_first);
// silu(group_norm(x)) in one pass over x (the VAEs' norm + nonlinearity): the same values as the two ops,
// the norm rounded to x's dtype before the silu.
Tensor group_norm_silu(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps,
                       ImageLayout layout = ImageLayout::channels_first);
// F.normalize over the channels (dim 1) times scale and w[C] (optional): x [N, C, ...] /
// max(||x[n, :, ...]||_2, eps) * scale * w (Wan's RMS_norm: scale sqrt(C)); f32 arithmetic, a bf16 result
// rounded after the normalisation and after each product as torch's op-by-op bf16 (others once).
Tensor channel_norm(const Tensor& x, const Tensor& w, double scale, double eps = 1e-12);
// silu(channel_norm(x)) in one pass (the Wan VAE's norm + nonlinearity): the same values as the two ops.
Tensor channel_norm_silu(const Tensor& x, const Tensor& w, double scale, double eps = 1e-12);
// x [B, S, H, D]; cos, sin [S, D] (each value repeated for the pair): out[2k] = x[2k]c - x[2k+1]s,
// out[2k+1] = x[2k+1]c + x[2k]s, computed in f32.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
// rope(concat([rms_norm(xs[i], ws[i], eps), ...], dim 1), cos, sin) in one pass over the rows (FLUX's q / k:
// the text and image streams' per-head RMSNorms, then the rotary embedding of the joint sequence): the same
// values as those ops (each norm rounded to x's dtype before the rotation). xs[i] [B, S_i, H, D] of one
// dtype, ws[i] [D] or an undefined tensor; cos, sin [sum S_i, D]. On a device without the fused kernel, and
// while a trace records pieces (compile's capture), it runs (records) those ops.
Tensor rms_norm_rope(const std::vector<Tensor>& xs, const std::vector<Tensor>& ws, double eps, const Tensor& cos,
                     const Tensor& sin);
// Ops that ops.h runs as the ops they stand for where a device has no kernel for them (rms_norm_rope): a device
// needs no kernel of its own for these.
bool runs_as_pieces_without_kernel(OpKind k);
// q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv]; optional additive mask broadcastable to
// [B, H, Sq, Sk]; scale defaults to 1/sqrt(D) when <= 0. Never materialises Sq x Sk.
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
            double scale = 0.0);

// ---- convolution and resampling ----
struct Conv2dPad {
  int64_t left = 0, right = 0, top = 0, bottom = 0;
};
// x [N, C, H, W] -> [N, O, Ho, Wo], or channels-last [N, H, W, C] -> [N, Ho, Wo, O]; w [O, C, kh, kw] either way.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, Conv2dPad pad,
              ImageLayout layout = ImageLayout::channels_first);
// residual + conv2d(x) in one op (the VAE resnets' skip connection): the same values as the two ops, the
// conv rounded to x's dtype before the add; residual has the conv's output shape and x's dtype.
Tensor conv2d_add(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, Conv2dPad pad,
                  const Tensor& residual, ImageLayout layout = ImageLayout::channels_first);
Tensor upsample_nearest2x(const Tensor& x, ImageLayout layout = ImageLayout::channels_first);
// Whether `device`'s convolutions of `dtype` run faster channels-last (the device's backend decides: the
// CPU where oneDNN's convolution runs them, DIFFQ_IMAGE_LAYOUT overriding). Models whose convolutions
// dominate (the VAEs) keep their activations in the layout this picks.
bool prefers_channels_last(Device device, DType dtype);
// x [N, C, ...] <-> [N, ..., C] (contiguous copies); channels_last_view: the permuted view, no copy.
Tensor to_channels_last(const Tensor& x);
Tensor to_channels_first(const Tensor& x);
Tensor channels_last_view(const Tensor& x);

// ---- lookup and reductions ----
Tensor embedding(const Tensor& ids, const Tensor& table);
Tensor reduce(const Tensor& x, ReduceFn fn, std::vector<int64_t> dims, bool keepdim = false);
inline Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false) {
  return reduce(x, ReduceFn::sum, std::move(dims), keepdim);
}
inline Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false) {
  return reduce(x, ReduceFn::mean, std::move(dims), keepdim);
}
inline Tensor max(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false) {
  return reduce(x, ReduceFn::max, std::move(dims), keepdim);
}
// absmax per block of `block` elements along the last dim (block = K gives per-row absmax); f32 out.
Tensor absmax_blocks(const Tensor& x, int64_t block);

}  // namespace diffq::ops
