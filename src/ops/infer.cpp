// Output shape/dtype of every op, and the validation of its inputs (one place for all backends).
#include <algorithm>

#include "diffq/error.h"
#include "ops/op.h"
#include "ops/packed_weight.h"

namespace diffq::ops {

namespace {

const char* name_of(const OpCall& c) { return op_name(c.kind).data(); }

void need_inputs(const OpCall& c, size_t n) {
  check(c.inputs.size() >= n, name_of(c), "expects ", n, " inputs, got ", c.inputs.size());
  for (size_t i = 0; i < n; ++i) check(c.inputs[i].defined(), name_of(c), "input ", i, " is undefined");
}

void same_device(const OpCall& c) {
  const Device d = c.inputs[0].device();
  for (const Tensor& t : c.inputs)
    check(!t.defined() || t.device() == d, name_of(c), "inputs on different devices: ",
          d.str(), " and ", t.device().str());
}

void need_float(const OpCall& c, const Tensor& t, const char* what) {
  check(is_floating(t.dtype()), name_of(c), what, " must be a floating tensor, got ", t.str());
}

OutputMeta like(const Tensor& t, Shape shape) { return {std::move(shape), t.dtype(), t.device()}; }

// An image op's layout (attrs.i1): channels-last, channels-first, or an error naming the value.
bool channels_last(const OpCall& c, const char* op) {
  check(c.attrs.i1 == int64_t(ImageLayout::channels_first) || c.attrs.i1 == int64_t(ImageLayout::channels_last), op,
        "layout attribute ", c.attrs.i1, " is neither channels-first (0) nor channels-last (1)");
  return c.attrs.i1 == int64_t(ImageLayout::channels_last);
}

OutputMeta infer_linear(const OpCall& c) {
  need_inputs(c, 2);
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  check(x.dim() >= 1 && w.dim() == 2, "linear", "expects x[..., K] and w[N, K], got ", x.str(), " and ",
        w.str());
  check(x.size(-1) == w.size(1), "linear", "x ", shape_str(x.shape()), " and w ", shape_str(w.shape()),
        " disagree on K");
  if (c.inputs.size() > 2 && c.inputs[2].defined())
    check(c.inputs[2].dim() == 1 && c.inputs[2].size(0) == w.size(0), "linear", "bias ",
          shape_str(c.inputs[2].shape()), " does not match N = ", w.size(0));
  need_float(c, x, "x");
  Shape s = x.shape();
  s.back() = w.size(0);
  return like(x, s);
}

OutputMeta infer_matmul(const OpCall& c) {
  need_inputs(c, 2);
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  check(a.dim() >= 2 && b.dim() >= 2, "matmul", "expects rank >= 2, got ", a.str(), " and ", b.str());
  check(a.size(-1) == b.size(-2), "matmul", "shapes ", shape_str(a.shape()), " and ",
        shape_str(b.shape()), " disagree on K");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape s = broadcast_shapes(ba, bb, "matmul");
  s.push_back(a.size(-2));
  s.push_back(b.size(-1));
  return like(a, s);
}

OutputMeta infer_norm(const OpCall& c, int64_t param_dim_size) {
  need_inputs(c, 1);
  const Tensor& x = c.inputs[0];
  need_float(c, x, "x");
  for (size_t i = 1; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined())
      check(c.inputs[i].numel() == param_dim_size, name_of(c), "parameter ", i, " has ",
            c.inputs[i].numel(), " elements, expected ", param_dim_size);
  return like(x, x.shape());
}

OutputMeta infer_sdpa(const OpCall& c) {
  need_inputs(c, 3);
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "sdpa", "expects [B, H, S, D] inputs, got ",
        q.str(), ", ", k.str(), ", ", v.str());
  check(q.size(0) == k.size(0) && k.size(0) == v.size(0) && q.size(1) == k.size(1) &&
            k.size(1) == v.size(1) && q.size(3) == k.size(3) && k.size(2) == v.size(2),
        "sdpa", "incompatible q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
        shape_str(v.shape()));
  if (c.inputs.size() > 3 && c.inputs[3].defined())
    broadcast_shapes(c.inputs[3].shape(), {q.size(0), q.size(1), q.size(2), k.size(2)}, "sdpa mask");
  return like(q, {q.size(0), q.size(1), q.size(2), v.size(3)});
}

OutputMeta infer_conv2d(const OpCall& c) {
  need_inputs(c, 2);
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const bool last = channels_last(c, "conv2d");
  // x's channels, height and width dims
  const int64_t dc = last ? 3 : 1, dh = last ? 1 : 2, dw = last ? 2 : 3;
  check(x.dim() == 4 && w.dim() == 4 && x.size(dc) == w.size(1), "conv2d", "expects x",
        last ? "[N, H, W, C]" : "[N, C, H, W]", " and w[O, C, kh, kw], got ", x.str(), " and ", w.str());
  check(c.attrs.ints.size() == 5, "conv2d", "attrs need {stride, left, right, top, bottom}");
  const int64_t s = c.attrs.ints[0];
  check(s >= 1, "conv2d", "stride must be >= 1");
  const int64_t h = x.size(dh) + c.attrs.ints[3] + c.attrs.ints[4];
  const int64_t wd = x.size(dw) + c.attrs.ints[1] + c.attrs.ints[2];
  check(h >= w.size(2) && wd >= w.size(3), "conv2d", "padded input ", h, "x", wd,
        " smaller than kernel ", w.size(2), "x", w.size(3));
  if (c.inputs.size() > 2 && c.inputs[2].defined())
    check(c.inputs[2].numel() == w.size(0), "conv2d", "bias has ", c.inputs[2].numel(),
          " elements, expected ", w.size(0));
  const int64_t ho = (h - w.size(2)) / s + 1, wo = (wd - w.size(3)) / s + 1;
  const Shape out = last ? Shape{x.size(0), ho, wo, w.size(0)} : Shape{x.size(0), w.size(0), ho, wo};
  if (c.inputs.size() > 3 && c.inputs[3].defined())
    check(c.inputs[3].shape() == out && c.inputs[3].dtype() == x.dtype(), "conv2d", "residual ", c.inputs[3].str(),
          " must have the output's shape ", shape_str(out), " and x's dtype ", dtype_name(x.dtype()));
  return like(x, out);
}

OutputMeta infer_concat(const OpCall& c) {
  check(!c.inputs.empty(), "concat", "needs at least one input");
  const Tensor& a = c.inputs[0];
  const int64_t d = wrap_dim(c.attrs.i0, a.dim(), "concat");
  Shape s = a.shape();
  s[d] = 0;
  for (const Tensor& t : c.inputs) {
    check(t.defined() && t.dim() == a.dim() && t.dtype() == a.dtype(), "concat",
          "inputs must share rank and dtype: ", a.str(), " vs ", t.str());
    for (int64_t i = 0; i < a.dim(); ++i)
      check(i == d || t.size(i) == a.size(i), "concat", "shape ", shape_str(t.shape()),
            " does not match ", shape_str(a.shape()), " outside dim ", d);
    s[d] += t.size(d);
  }
  return like(a, s);
}

OutputMeta infer_reduce(const OpCall& c) {
  need_inputs(c, 1);
  const Tensor& x = c.inputs[0];
  std::vector<bool> red(x.dim(), c.attrs.ints.empty());
  for (int64_t d : c.attrs.ints) red[wrap_dim(d, x.dim(), "reduce")] = true;
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (!red[i]) s.push_back(x.size(i));
    else if (c.attrs.flag) s.push_back(1);
  }
  return like(x, s);
}

}  // namespace

OutputMeta infer(const OpCall& c) {
  switch (c.kind) {
    case OpKind::copy: need_inputs(c, 1); return like(c.inputs[0], c.inputs[0].shape());
    case OpKind::cast:
      need_inputs(c, 1);
      return {c.inputs[0].shape(), c.attrs.dtype, c.inputs[0].device()};
    case OpKind::to_device:
      need_inputs(c, 1);
      return {c.inputs[0].shape(), c.inputs[0].dtype(), c.attrs.device};
    case OpKind::linear: same_device(c); return infer_linear(c);
    case OpKind::matmul: same_device(c); return infer_matmul(c);
    case OpKind::binary:
      need_inputs(c, 2);
      same_device(c);
      return like(c.inputs[0], broadcast_shapes(c.inputs[0].shape(), c.inputs[1].shape(), "binary"));
    case OpKind::scalar:
    case OpKind::clamp:
    case OpKind::unary:
      need_inputs(c, 1);
      if (c.kind == OpKind::unary) need_float(c, c.inputs[0], "x");
      return like(c.inputs[0], c.inputs[0].shape());
    case OpKind::softmax:
      need_inputs(c, 1);
      need_float(c, c.inputs[0], "x");
      wrap_dim(c.attrs.i0, c.inputs[0].dim(), "softmax");
      return like(c.inputs[0], c.inputs[0].shape());
    case OpKind::layer_norm:
    case OpKind::rms_norm:
      need_inputs(c, 1);
      same_device(c);
      return infer_norm(c, c.inputs[0].size(-1));
    case OpKind::channel_norm:
      need_inputs(c, 1);
      same_device(c);
      check(c.inputs[0].dim() >= 2, "channel_norm", "expected x [N, C, ...], got ", c.inputs[0].str());
      return infer_norm(c, c.inputs[0].size(1));
    case OpKind::group_norm: {
      need_inputs(c, 1);
      same_device(c);
      const Tensor& x = c.inputs[0];
      const int64_t ch = channels_last(c, "group_norm") ? -1 : 1;
      check(x.dim() >= 2 && c.attrs.i0 > 0 && x.size(ch) % c.attrs.i0 == 0, "group_norm", "channels of ",
            x.str(), " not divisible into ", c.attrs.i0, " groups");
      return infer_norm(c, x.size(ch));
    }
    case OpKind::rope: {
      need_inputs(c, 3);
      same_device(c);
      const Tensor &x = c.inputs[0], &cs = c.inputs[1], &sn = c.inputs[2];
      check(x.dim() == 4 && x.size(3) % 2 == 0, "rope", "expects x[B, S, H, D] with even D, got ", x.str());
      check(cs.shape() == Shape{x.size(1), x.size(3)} && sn.shape() == cs.shape(), "rope", "cos/sin ",
            shape_str(cs.shape()), " must be [S, D] = ", shape_str({x.size(1), x.size(3)}));
      return like(x, x.shape());
    }
    case OpKind::sdpa: same_device(c); return infer_sdpa(c);
    case OpKind::conv2d: same_device(c); return infer_conv2d(c);
    case OpKind::upsample_nearest2x: {
      need_inputs(c, 1);
      const Tensor& x = c.inputs[0];
      if (channels_last(c, "upsample_nearest2x")) {
        check(x.dim() == 4, "upsample_nearest2x", "expects [N, H, W, C], got ", x.str());
        return like(x, {x.size(0), 2 * x.size(1), 2 * x.size(2), x.size(3)});
      }
      check(x.dim() == 4, "upsample_nearest2x", "expects [N, C, H, W], got ", x.str());
      return like(x, {x.size(0), x.size(1), 2 * x.size(2), 2 * x.size(3)});
    }
    case OpKind::concat: same_device(c); return infer_concat(c);
    case OpKind::embedding: {
      need_inputs(c, 2);
      same_device(c);
      const Tensor &ids = c.inputs[0], &tab = c.inputs[1];
      check(!is_floating(ids.dtype()) && ids.dtype() != DType::boolean, "embedding",
            "ids must be integers, got ", ids.str());
      check(tab.dim() == 2, "embedding", "table must be [V, D], got ", tab.str());
      Shape s = ids.shape();
      s.push_back(tab.size(1));
      return like(tab, s);
    }
    case OpKind::reduce: return infer_reduce(c);
    case OpKind::absmax_blocks: {
      need_inputs(c, 1);
      const Tensor& x = c.inputs[0];
      const int64_t b = c.attrs.i0;
      check(x.dim() >= 1 && b > 0 && x.size(-1) % b == 0, "absmax_blocks", "last dim of ", x.str(),
            " is not a multiple of block ", b);
      Shape s = x.shape();
      s.back() /= b;
      return {s, DType::f32, x.device()};
    }
    case OpKind::linear_q: {
      need_inputs(c, 1);
      same_device(c);  // x, the bias and the packed tensors on one device
      const Tensor& x = c.inputs[0];
      check(c.attrs.packed != nullptr, "linear_q", "no packed weight");
      const Shape w = c.attrs.packed->shape();
      need_float(c, x, "x");
      check(x.dim() >= 1 && w.size() == 2 && x.size(-1) == w[1], "linear_q", "x ", x.str(), " and the ",
            c.attrs.packed->scheme(), " weight ", shape_str(w), " disagree on K");
      if (c.inputs.size() > 1 && c.inputs[1].defined())
        check(c.inputs[1].dim() == 1 && c.inputs[1].size(0) == w[0], "linear_q", "bias ",
              shape_str(c.inputs[1].shape()), " does not match N = ", w[0]);
      Shape s = x.shape();
      s.back() = w[0];
      return like(x, s);
    }
    case OpKind::mul_add: {
      need_inputs(c, 3);
      same_device(c);
      for (const auto& [t, what] : {std::pair{&c.inputs[0], "a"}, {&c.inputs[1], "b"}, {&c.inputs[2], "c"}})
        need_float(c, *t, what);
      check(is_floating(c.attrs.dtype), "mul_add", "the output dtype must be floating, got ", dtype_name(c.attrs.dtype));
      const Shape ab = broadcast_shapes(c.inputs[0].shape(), c.inputs[1].shape(), "mul_add");
      return {broadcast_shapes(ab, c.inputs[2].shape(), "mul_add"), c.attrs.dtype, c.inputs[0].device()};
    }
    case OpKind::rms_norm_rope: {
      check(c.inputs.size() >= 4 && c.inputs.size() % 2 == 0, "rms_norm_rope",
            "expects cos, sin and (x, w) per segment, got ", c.inputs.size(), " inputs");
      same_device(c);
      const Tensor &cs = c.inputs[0], &sn = c.inputs[1], &x0 = c.inputs[2];
      check(x0.dim() == 4 && x0.size(3) % 2 == 0, "rms_norm_rope", "expects x[B, S, H, D] with even D, got ", x0.str());
      need_float(c, x0, "x");
      int64_t S = 0;
      for (size_t i = 2; i < c.inputs.size(); i += 2) {
        const Tensor& x = c.inputs[i];
        check(x.dim() == 4 && x.size(0) == x0.size(0) && x.size(2) == x0.size(2) && x.size(3) == x0.size(3) &&
                  x.dtype() == x0.dtype(),
              "rms_norm_rope", "segment ", i / 2 - 1, " is ", x.str(), ", expected [", x0.size(0), ", S, ", x0.size(2),
              ", ", x0.size(3), "] of ", dtype_name(x0.dtype()));
        const Tensor& w = c.inputs[i + 1];
        check(!w.defined() || w.numel() == x0.size(3), "rms_norm_rope", "the weight of segment ", i / 2 - 1, " has ",
              w.defined() ? w.numel() : 0, " elements, expected ", x0.size(3));
        S += x.size(1);
      }
      check(cs.shape() == Shape{S, x0.size(3)} && sn.shape() == cs.shape(), "rms_norm_rope", "cos/sin ",
            shape_str(cs.shape()), " must be [S, D] = ", shape_str({S, x0.size(3)}));
      return like(x0, {x0.size(0), S, x0.size(2), x0.size(3)});
    }
    case OpKind::count_: break;
  }
  fail("dispatch", "unknown op kind ", int(c.kind));
}

}  // namespace diffq::ops
