// Builders: each public op turns its arguments into an OpCall for the dispatcher.
#include "ops/ops.h"

#include "diffq/error.h"
#include "ops/trace.h"
#include "backend/device_interface.h"

namespace diffq::ops {

namespace {
Tensor call1(OpKind k, std::vector<Tensor> in, Attrs a = {}) {
  return dispatch(OpCall{k, std::move(in), std::move(a)});
}
Tensor binary(const Tensor& a, const Tensor& b, BinaryFn fn) {
  Attrs at;
  at.i0 = int64_t(fn);
  return call1(OpKind::binary, {a, b}, at);
}
Tensor scalar(const Tensor& x, ScalarFn fn, double s) {
  Attrs at;
  at.i0 = int64_t(fn);
  at.f0 = s;
  return call1(OpKind::scalar, {x}, at);
}
}  // namespace

Tensor copy(const Tensor& x) { return call1(OpKind::copy, {x}); }

Tensor cast(const Tensor& x, DType dtype) {
  Attrs a;
  a.dtype = dtype;
  return call1(OpKind::cast, {x}, a);
}

Tensor to_device(const Tensor& x, Device d) {
  Attrs a;
  a.device = d;
  return call1(OpKind::to_device, {x}, a);
}

void copy_into(const Tensor& src, const Tensor& dst) {
  check(src.defined() && dst.defined() && src.shape() == dst.shape(), "copy", "copy into ",
        dst.defined() ? shape_str(dst.shape()) : std::string("(undefined)"), " from ",
        src.defined() ? shape_str(src.shape()) : std::string("(undefined)"));
  check(src.device() == dst.device(), "copy", "copy into ", dst.device().str(), " from ", src.device().str(),
        ": same device only");
  Attrs a;
  a.dtype = dst.dtype();
  Tensor out = dst;
  execute_into(OpCall{src.dtype() == dst.dtype() ? OpKind::copy : OpKind::cast, {src}, a}, out);
}

namespace {
// The tensors' concatenation along dim as a view, where they are slices laid end to end along dim in one
// storage (a block's output split into its streams and joined again: FLUX's single blocks' cat([txt, img])
// of the previous block's halves): the same values without the copy. Undefined otherwise, and while a trace
// records (its graph keeps the op).
Tensor adjacent_span(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.size() < 2 || Trace::current() || !xs[0].defined() || xs[0].is_symbolic()) return {};
  const Tensor& a = xs[0];
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  if (d < 0 || d >= a.dim() || a.strides()[size_t(d)] <= 0) return {};
  int64_t len = a.size(d);
  for (size_t i = 1; i < xs.size(); ++i) {
    const Tensor &p = xs[i - 1], &x = xs[i];
    if (!x.defined() || x.storage() != a.storage() || x.dtype() != a.dtype() || x.dim() != a.dim() ||
        x.strides() != a.strides() || x.offset() != p.offset() + p.size(d) * a.strides()[size_t(d)])
      return {};
    for (int64_t j = 0; j < a.dim(); ++j)
      if (j != d && x.size(j) != a.size(j)) return {};
    len += x.size(d);
  }
  Shape shape = a.shape();
  shape[size_t(d)] = len;
  return Tensor(a.storage(), shape, a.strides(), a.offset(), a.dtype());
}
}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  Attrs a;
  a.i0 = dim;
  OpCall call{OpKind::concat, xs, a};
  if (Tensor span = adjacent_span(xs, dim); span.defined()) {
    infer(call);  // its checks, as the op
    return span;
  }
  return dispatch(std::move(call));
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim) {
  check(repeats >= 1, "repeat_interleave", "repeats must be >= 1, got ", repeats);
  if (dim < 0) dim += x.dim();
  check(dim >= 0 && dim < x.dim(), "repeat_interleave", "dim ", dim, " out of range for a ", x.dim(), "-d tensor");
  if (repeats == 1) return x;
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < x.shape()[size_t(dim)]; ++i)
    for (int64_t k = 0; k < repeats; ++k) parts.push_back(x.slice(dim, i, i + 1));
  return concat(parts, dim);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return call1(OpKind::linear, {x, w, bias});
}

Tensor matmul(const Tensor& a, const Tensor& b) { return call1(OpKind::matmul, {a, b}); }

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::add); }
Tensor mul_add(const Tensor& a, const Tensor& b, const Tensor& c, DType out, bool round_product) {
  Attrs at;
  at.dtype = out;
  at.flag = round_product;
  OpCall call{OpKind::mul_add, {a, b, c}, at};
  if (Trace* t = Trace::current(); t && t->records_pieces()) {
    infer(call);  // its checks first (integer operands, shapes), as eager
    // Recorded as the chain it stands for (the same bits): compile fuses those pieces with their
    // neighbours (a norm and its modulation, compile/fuse_norm.cpp), which one opaque node would stop.
    Tensor p = mul(a.to(DType::f32), b);  // f32 product of the exactly widened values
    if (round_product) p = p.to(out);
    return add(p, c).to(out);
  }
  return dispatch(std::move(call));
}
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::mul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::div); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::maximum); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryFn::minimum); }
Tensor add_scalar(const Tensor& x, double s) { return scalar(x, ScalarFn::add, s); }
Tensor mul_scalar(const Tensor& x, double s) { return scalar(x, ScalarFn::mul, s); }
Tensor rsub_scalar(const Tensor& x, double s) { return scalar(x, ScalarFn::rsub, s); }
Tensor pow_scalar(const Tensor& x, double s) { return scalar(x, ScalarFn::pow, s); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  Attrs a;
  a.f0 = lo;
  a.f1 = hi;
  return call1(OpKind::clamp, {x}, a);
}

Tensor unary(const Tensor& x, UnaryFn fn) {
  Attrs a;
  a.i0 = int64_t(fn);
  return call1(OpKind::unary, {x}, a);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  Attrs a;
  a.i0 = dim;
  return call1(OpKind::softmax, {x}, a);
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Attrs a;
  a.f0 = eps;
  return call1(OpKind::layer_norm, {x, w, b}, a);
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  Attrs a;
  a.f0 = eps;
  return call1(OpKind::rms_norm, {x, w}, a);
}

namespace {
// The norms' attributes; silu: the op's fused silu (attrs.flag).
Attrs group_norm_attrs(int64_t groups, double eps, bool silu, ImageLayout layout) {
  Attrs a;
  a.i0 = groups;
  a.i1 = int64_t(layout);
  a.f0 = eps;
  a.flag = silu;
  return a;
}
Attrs channel_norm_attrs(double scale, double eps, bool silu) {
  Attrs a;
  a.f0 = eps;
  a.f1 = scale;
  a.flag = silu;
  return a;
}
}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps,
                  ImageLayout layout) {
  return call1(OpKind::group_norm, {x, w, b}, group_norm_attrs(groups, eps, false, layout));
}

Tensor group_norm_silu(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps,
                       ImageLayout layout) {
  return call1(OpKind::group_norm, {x, w, b}, group_norm_attrs(groups, eps, true, layout));
}

Tensor channel_norm(const Tensor& x, const Tensor& w, double scale, double eps) {
  return call1(OpKind::channel_norm, {x, w}, channel_norm_attrs(scale, eps, false));
}

Tensor channel_norm_silu(const Tensor& x, const Tensor& w, double scale, double eps) {
  return call1(OpKind::channel_norm, {x, w}, channel_norm_attrs(scale, eps, true));
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return call1(OpKind::rope, {x, cos, sin});
}

Tensor rms_norm_rope(const std::vector<Tensor>& xs, const std::vector<Tensor>& ws, double eps, const Tensor& cos,
                     const Tensor& sin) {
  check(!xs.empty() && ws.size() == xs.size(), "rms_norm_rope", "expects one weight (or an undefined tensor) per ",
        "segment, got ", xs.size(), " segments and ", ws.size(), " weights");
  OpCall call{OpKind::rms_norm_rope, {cos, sin}, {}};
  call.attrs.f0 = eps;
  for (size_t i = 0; i < xs.size(); ++i) call.inputs.insert(call.inputs.end(), {xs[i], ws[i]});
  infer(call);  // its checks first, whichever way it runs
  const Trace* t = Trace::current();
  if ((t && t->records_pieces()) || !find_kernel(OpKind::rms_norm_rope, xs[0].device().kind)) {
    // The ops it stands for (the same bits): what compile's capture records (it fuses them itself,
    // compile/fuse_rope.cpp) and what a device without the fused kernel runs.
    std::vector<Tensor> normed;
    for (size_t i = 0; i < xs.size(); ++i) normed.push_back(rms_norm(xs[i], ws[i], eps));
    return rope(normed.size() == 1 ? normed[0] : concat(normed, 1), cos, sin);
  }
  return dispatch(std::move(call));
}

bool runs_as_pieces_without_kernel(OpKind k) { return k == OpKind::rms_norm_rope; }

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale) {
  Attrs a;
  a.f0 = scale;
  return call1(OpKind::sdpa, {q, k, v, mask}, a);
}

namespace {
Attrs conv2d_attrs(int64_t stride, Conv2dPad pad, ImageLayout layout) {
  Attrs a;
  a.ints = {stride, pad.left, pad.right, pad.top, pad.bottom};
  a.i1 = int64_t(layout);
  return a;
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, Conv2dPad pad, ImageLayout layout) {
  return call1(OpKind::conv2d, {x, w, b}, conv2d_attrs(stride, pad, layout));
}

Tensor conv2d_add(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, Conv2dPad pad,
                  const Tensor& residual, ImageLayout layout) {
  check(residual.defined(), "conv2d_add", "needs a residual tensor");
  return call1(OpKind::conv2d, {x, w, b, residual}, conv2d_attrs(stride, pad, layout));
}

Tensor upsample_nearest2x(const Tensor& x, ImageLayout layout) {
  Attrs a;
  a.i1 = int64_t(layout);
  return call1(OpKind::upsample_nearest2x, {x}, a);
}

bool prefers_channels_last(Device device, DType dtype) {
  backend::ensure_backends_registered();
  backend::DeviceInterface* d = backend::device_interface(device.kind);
  return d && d->prefers_channels_last(dtype);
}

namespace {
// The permutation moving dim 1 (channels) last, or back.
std::vector<int64_t> channels_perm(int64_t dims, bool to_last) {
  std::vector<int64_t> p{0};
  if (to_last) {
    for (int64_t d = 2; d < dims; ++d) p.push_back(d);
    p.push_back(1);
  } else {
    p.push_back(dims - 1);
    for (int64_t d = 1; d + 1 < dims; ++d) p.push_back(d);
  }
  return p;
}
}  // namespace

Tensor channels_last_view(const Tensor& x) {
  check(x.dim() >= 3, "to_channels_last", "expects [N, C, ...], got ", x.str());
  return x.permute(channels_perm(x.dim(), true));
}

Tensor to_channels_last(const Tensor& x) { return channels_last_view(x).contiguous(); }

Tensor to_channels_first(const Tensor& x) {
  check(x.dim() >= 3, "to_channels_first", "expects [N, ..., C], got ", x.str());
  return x.permute(channels_perm(x.dim(), false)).contiguous();
}

Tensor embedding(const Tensor& ids, const Tensor& table) {
  return call1(OpKind::embedding, {ids, table});
}

Tensor reduce(const Tensor& x, ReduceFn fn, std::vector<int64_t> dims, bool keepdim) {
  Attrs a;
  a.i0 = int64_t(fn);
  a.ints = std::move(dims);
  a.flag = keepdim;
  return call1(OpKind::reduce, {x}, a);
}

Tensor absmax_blocks(const Tensor& x, int64_t block) {
  Attrs a;
  a.i0 = block;
  return call1(OpKind::absmax_blocks, {x}, a);
}

}  // namespace diffq::ops
