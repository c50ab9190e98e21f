// f64 reference ops: literal loops over the definitions, for tests only (see reference_ops.h).
#include "backend/reference/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "diffq/error.h"
#include "ops/packed_weight.h"

namespace diffq::reference {

using ops::BinaryFn;
using ops::OpKind;
using ops::ReduceFn;
using ops::ScalarFn;
using ops::UnaryFn;

namespace {

Array make(Shape s) {
  Array a;
  a.v.assign(size_t(shape_numel(s)), 0.0);
  a.shape = std::move(s);
  a.defined = true;
  return a;
}

// Index into `in` (right-aligned, broadcast) of the element at multi-index `idx` of the output.
int64_t bcast_index(const Shape& out, const std::vector<int64_t>& idx, const Shape& in) {
  int64_t off = 0;
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) off = off * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// x [N, ..., C] -> [N, C, ...] (to_first), or [N, C, ...] -> [N, ..., C].
Array move_channels(const Array& x, bool to_first) {
  if (!x.defined) return x;
  const size_t d = x.shape.size();
  Shape s{x.shape[0]};
  if (to_first) s.push_back(x.shape[d - 1]);
  for (size_t i = to_first ? 1 : 2; i < (to_first ? d - 1 : d); ++i) s.push_back(x.shape[i]);
  if (!to_first) s.push_back(x.shape[1]);
  const int64_t N = x.shape[0], C = to_first ? x.shape[d - 1] : x.shape[1];
  const int64_t P = int64_t(x.v.size()) / std::max<int64_t>(N * C, 1);
  Array y = make(s);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t first = (n * C + c) * P + p, last = (n * P + p) * C + c;
        y.v[size_t(to_first ? first : last)] = x.v[size_t(to_first ? last : first)];
      }
  return y;
}

}  // namespace

Array from_tensor(const Tensor& t) {
  if (!t.defined()) return {};
  Array a;
  a.shape = t.shape();
  a.v = t.to_f64_vector();
  a.defined = true;
  return a;
}

void round_to(Array& a, DType dt) {
  alignas(8) unsigned char buf[8];
  for (double& x : a.v) {
    store_from_double(buf, dt, 0, x);
    x = load_as_double(buf, dt, 0);
  }
}

Array linear(const Array& x, const Array& w, const Array& b) {
  const int64_t K = w.shape[1], N = w.shape[0], M = int64_t(x.v.size()) / K;
  Shape s = x.shape;
  s.back() = N;
  Array y = make(s);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b.defined ? b.v[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += x.v[m * K + k] * w.v[n * K + k];
      y.v[m * N + n] = acc;
    }
  return y;
}

Array matmul(const Array& a, const Array& b) {
  const int64_t M = a.shape[a.shape.size() - 2], K = a.shape.back(), N = b.shape.back();
  const Shape ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "reference matmul");
  Shape s = batch;
  s.push_back(M);
  s.push_back(N);
  Array y = make(s);
  const int64_t nb = shape_numel(batch);
  for (int64_t i = 0; i < nb; ++i) {
    const auto idx = unravel(i, batch);
    const double* pa = a.v.data() + bcast_index(batch, idx, ba) * M * K;
    const double* pb = b.v.data() + bcast_index(batch, idx, bb) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += pa[m * K + k] * pb[k * N + n];
        y.v[(i * M + m) * N + n] = acc;
      }
  }
  return y;
}

Array binary(BinaryFn fn, const Array& a, const Array& b, bool integer) {
  Array y = make(broadcast_shapes(a.shape, b.shape, "reference binary"));
  for (int64_t i = 0; i < int64_t(y.v.size()); ++i) {
    const auto idx = unravel(i, y.shape);
    const double x = a.v[bcast_index(y.shape, idx, a.shape)], z = b.v[bcast_index(y.shape, idx, b.shape)];
    double r = 0;
    switch (fn) {
      case BinaryFn::add: r = x + z; break;
      case BinaryFn::sub: r = x - z; break;
      case BinaryFn::mul: r = x * z; break;
      case BinaryFn::div: r = integer ? std::trunc(x / z) : x / z; break;
      case BinaryFn::maximum: r = (std::isnan(x) || std::isnan(z)) ? NAN : std::max(x, z); break;
      case BinaryFn::minimum: r = (std::isnan(x) || std::isnan(z)) ? NAN : std::min(x, z); break;
    }
    y.v[i] = r;
  }
  return y;
}

Array scalar(ScalarFn fn, const Array& x, double s) {
  Array y = x;
  for (double& v : y.v) {
    switch (fn) {
      case ScalarFn::add: v = v + s; break;
      case ScalarFn::mul: v = v * s; break;
      case ScalarFn::rsub: v = s - v; break;
      case ScalarFn::pow: v = std::pow(v, s); break;
    }
  }
  return y;
}

Array clamp(const Array& x, double lo, double hi) {
  Array y = x;
  for (double& v : y.v)
    if (!std::isnan(v)) v = std::min(std::max(v, lo), hi);
  return y;
}

Array unary(UnaryFn fn, const Array& x) {
  Array y = x;
  const double k = std::sqrt(2.0 / M_PI);
  for (double& v : y.v) {
    switch (fn) {
      case UnaryFn::silu: v = v * sigmoid(v); break;
      case UnaryFn::gelu_tanh: v = 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))); break;
      case UnaryFn::gelu_erf: v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); break;
      case UnaryFn::quick_gelu: v = v * sigmoid(1.702 * v); break;
      case UnaryFn::exp: v = std::exp(v); break;
      case UnaryFn::neg: v = -v; break;
      case UnaryFn::sqrt: v = std::sqrt(v); break;
      case UnaryFn::rsqrt: v = 1.0 / std::sqrt(v); break;
      case UnaryFn::tanh: v = std::tanh(v); break;
      case UnaryFn::sigmoid: v = sigmoid(v); break;
      case UnaryFn::sin: v = std::sin(v); break;
      case UnaryFn::cos: v = std::cos(v); break;
      case UnaryFn::abs: v = std::fabs(v); break;
      case UnaryFn::square: v = v * v; break;
    }
  }
  return y;
}

Array softmax(const Array& x, int64_t dim) {
  dim = wrap_dim(dim, int64_t(x.shape.size()), "reference softmax");
  int64_t outer = 1, inner = 1;
  const int64_t n = x.shape[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (size_t d = size_t(dim) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  Array y = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) -> double& { return y.v[(o * n + j) * inner + i]; };
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, at(j));
      for (int64_t j = 0; j < n; ++j) s += std::exp(at(j) - m);
      for (int64_t j = 0; j < n; ++j) at(j) = std::exp(at(j) - m) / s;
    }
  return y;
}

Array layer_norm(const Array& x, const Array& w, const Array& b, double eps) {
  const int64_t n = x.shape.back(), rows = int64_t(x.v.size()) / std::max<int64_t>(n, 1);
  Array y = x;
  for (int64_t r = 0; r < rows; ++r) {
    double* p = y.v.data() + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += p[i];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += (p[i] - mean) * (p[i] - mean);
    var /= double(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i)
      p[i] = (p[i] - mean) * inv * (w.defined ? w.v[i] : 1.0) + (b.defined ? b.v[i] : 0.0);
  }
  return y;
}

Array rms_norm(const Array& x, const Array& w, double eps) {
  const int64_t n = x.shape.back(), rows = int64_t(x.v.size()) / std::max<int64_t>(n, 1);
  Array y = x;
  for (int64_t r = 0; r < rows; ++r) {
    double* p = y.v.data() + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += p[i] * p[i];
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * inv * (w.defined ? w.v[i] : 1.0);
  }
  return y;
}

Array channel_norm(const Array& x, const Array& w, double eps, double scale) {
  const int64_t N = x.shape[0], C = x.shape[1], P = int64_t(x.v.size()) / std::max<int64_t>(N * C, 1);
  Array y = x;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += x.v[size_t((n * C + c) * P + p)] * x.v[size_t((n * C + c) * P + p)];
      const double denom = std::max(std::sqrt(ss), eps);
      for (int64_t c = 0; c < C; ++c) {
        double& v = y.v[size_t((n * C + c) * P + p)];
        v = v / denom * scale * (w.defined ? w.v[size_t(c)] : 1.0);
      }
    }
  return y;
}

Array group_norm(const Array& x, int64_t groups, const Array& w, const Array& b, double eps) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const int64_t spatial = int64_t(x.v.size()) / std::max<int64_t>(N * C, 1), cg = C / groups;
  Array y = x;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      double* p = y.v.data() + (n * C + g * cg) * spatial;
      const int64_t cnt = cg * spatial;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < cnt; ++i) mean += p[i];
      mean /= double(cnt);
      for (int64_t i = 0; i < cnt; ++i) var += (p[i] - mean) * (p[i] - mean);
      var /= double(cnt);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < cnt; ++i) {
        const int64_t c = g * cg + i / spatial;
        p[i] = (p[i] - mean) * inv * (w.defined ? w.v[c] : 1.0) + (b.defined ? b.v[c] : 0.0);
      }
    }
  return y;
}

Array rope(const Array& x, const Array& cos, const Array& sin) {
  const int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  Array y = make(x.shape);
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((bb * S + s) * H + h) * D;
        for (int64_t k = 0; k < D; k += 2) {
          const double a = x.v[o + k], c = x.v[o + k + 1];
          y.v[o + k] = a * cos.v[s * D + k] - c * sin.v[s * D + k];
          y.v[o + k + 1] = c * cos.v[s * D + k + 1] + a * sin.v[s * D + k + 1];
        }
      }
  return y;
}

Array sdpa(const Array& q, const Array& k, const Array& v, const Array& mask, bool bool_mask,
           double scale) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[2], Dv = v.shape[3];
  if (scale <= 0) scale = 1.0 / std::sqrt(double(D));
  const Shape full = {B, H, Sq, Sk};
  Array y = make({B, H, Sq, Dv});
  std::vector<double> s(static_cast<size_t>(Sk));
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const double* qi = q.v.data() + ((bb * H + h) * Sq + i) * D;
        double m = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          const double* kj = k.v.data() + ((bb * H + h) * Sk + j) * D;
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += qi[d] * kj[d];
          acc *= scale;
          if (mask.defined) {
            const double mv = mask.v[bcast_index(full, {bb, h, i, j}, mask.shape)];
            acc = bool_mask ? (mv != 0 ? acc : -INFINITY) : acc + mv;
          }
          s[j] = acc;
          m = std::isnan(acc) ? acc : std::max(m, acc);  // a NaN score makes the row NaN
        }
        if (m == -INFINITY) continue;  // every key masked (or no key): a row of 0, as torch
        double l = 0;
        for (int64_t j = 0; j < Sk; ++j) l += (s[j] = std::exp(s[j] - m));
        double* yi = y.v.data() + ((bb * H + h) * Sq + i) * Dv;
        for (int64_t j = 0; j < Sk; ++j) {
          const double* vj = v.v.data() + ((bb * H + h) * Sk + j) * Dv;
          for (int64_t d = 0; d < Dv; ++d) yi[d] += s[j] / l * vj[d];
        }
      }
  return y;
}

Array conv2d(const Array& x, const Array& w, const Array& b, int64_t stride, int64_t pl, int64_t pr,
             int64_t pt, int64_t pb) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], KH = w.shape[2], KW = w.shape[3];
  const int64_t Ho = (H + pt + pb - KH) / stride + 1, Wo = (W + pl + pr - KW) / stride + 1;
  Array y = make({N, O, Ho, Wo});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < Ho; ++oy)
        for (int64_t ox = 0; ox < Wo; ++ox) {
          double acc = b.defined ? b.v[o] : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < KH; ++ky)
              for (int64_t kx = 0; kx < KW; ++kx) {
                const int64_t iy = oy * stride + ky - pt, ix = ox * stride + kx - pl;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += x.v[((n * C + c) * H + iy) * W + ix] * w.v[((o * C + c) * KH + ky) * KW + kx];
              }
          y.v[((n * O + o) * Ho + oy) * Wo + ox] = acc;
        }
  return y;
}

Array upsample_nearest2x(const Array& x) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  Array y = make({N, C, 2 * H, 2 * W});
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < 2 * H; ++i)
      for (int64_t j = 0; j < 2 * W; ++j)
        y.v[(p * 2 * H + i) * 2 * W + j] = x.v[(p * H + i / 2) * W + j / 2];
  return y;
}

Array concat(const std::vector<Array>& xs, int64_t dim) {
  dim = wrap_dim(dim, int64_t(xs[0].shape.size()), "reference concat");
  Shape s = xs[0].shape;
  s[dim] = 0;
  for (const Array& a : xs) s[dim] += a.shape[dim];
  Array y = make(s);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
  int64_t at = 0;
  for (const Array& a : xs) {
    const int64_t n = a.shape[dim];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < inner; ++i)
          y.v[(o * s[dim] + at + j) * inner + i] = a.v[(o * n + j) * inner + i];
    at += n;
  }
  return y;
}

Array embedding(const Array& ids, const Array& table) {
  const int64_t V = table.shape[0], D = table.shape[1];
  Shape s = ids.shape;
  s.push_back(D);
  Array y = make(s);
  for (size_t i = 0; i < ids.v.size(); ++i) {
    const int64_t id = int64_t(ids.v[i]);
    check(id >= 0 && id < V, "reference embedding", "id ", id, " out of range");
    for (int64_t d = 0; d < D; ++d) y.v[i * D + d] = table.v[id * D + d];
  }
  return y;
}

Array reduce(ReduceFn fn, const Array& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t rank = int64_t(x.shape.size());
  std::vector<bool> red(size_t(rank), dims.empty());
  for (int64_t d : dims) red[wrap_dim(d, rank, "reference reduce")] = true;
  Shape keep_shape(x.shape), out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (red[d]) keep_shape[d] = 1;
    if (!red[d]) out_shape.push_back(x.shape[d]);
    else if (keepdim) out_shape.push_back(1);
  }
  Array y = make(out_shape);
  std::vector<int64_t> count(y.v.size(), 0);
  for (double& v : y.v) v = fn == ReduceFn::max ? -INFINITY : 0.0;
  for (int64_t i = 0; i < int64_t(x.v.size()); ++i) {
    auto idx = unravel(i, x.shape);
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d) o = o * keep_shape[d] + (red[d] ? 0 : idx[d]);
    const double v = x.v[i];
    if (fn == ReduceFn::max) y.v[o] = (std::isnan(v) || std::isnan(y.v[o])) ? NAN : std::max(y.v[o], v);
    else y.v[o] += v;
    ++count[o];
  }
  if (fn == ReduceFn::mean)
    for (size_t o = 0; o < y.v.size(); ++o) y.v[o] /= double(count[o]);
  return y;
}

Array absmax_blocks(const Array& x, int64_t block) {
  Shape s = x.shape;
  s.back() /= block;
  Array y = make(s);
  for (size_t o = 0; o < y.v.size(); ++o) {
    double m = 0;
    for (int64_t i = 0; i < block; ++i) m = std::max(m, std::fabs(x.v[o * block + i]));
    y.v[o] = m;
  }
  return y;
}

static Array run_channels_first(const ops::OpCall& c, std::vector<Array>& in);

Array run(const ops::OpCall& c) {
  std::vector<Array> in;
  for (const Tensor& t : c.inputs) in.push_back(from_tensor(t));
  // A channels-last image op: its images (x, conv2d's residual) moved to channels-first, computed there,
  // and the result moved back.
  const bool image_op = c.kind == OpKind::conv2d || c.kind == OpKind::group_norm ||
                        c.kind == OpKind::upsample_nearest2x;
  if (image_op && c.attrs.i1 == int64_t(ops::ImageLayout::channels_last)) {
    ops::OpCall first = c;
    first.attrs.i1 = int64_t(ops::ImageLayout::channels_first);
    in[0] = move_channels(in[0], true);
    if (in.size() > 3) in[3] = move_channels(in[3], true);
    return move_channels(run_channels_first(first, in), false);
  }
  return run_channels_first(c, in);
}

// The op on channels-first images, inputs already converted.
static Array run_channels_first(const ops::OpCall& c, std::vector<Array>& in) {
  auto opt = [&](size_t i) { return i < in.size() ? in[i] : Array{}; };
  // The norms' fused silu (attrs.flag): the norm's output rounded to x's dtype, then silu on it.
  auto then_silu = [&](Array y) {
    if (!c.attrs.flag) return y;
    round_to(y, c.inputs[0].dtype());
    return unary(UnaryFn::silu, y);
  };
  const auto& a = c.attrs;
  switch (c.kind) {
    case OpKind::copy:
    case OpKind::cast:
    case OpKind::to_device: return in[0];
    case OpKind::linear: return linear(in[0], in[1], opt(2));
    case OpKind::matmul: return matmul(in[0], in[1]);
    case OpKind::binary: {
      const bool integer = !is_floating(c.inputs[0].dtype()) && !is_floating(c.inputs[1].dtype());
      return binary(BinaryFn(a.i0), in[0], in[1], integer);
    }
    case OpKind::scalar: return scalar(ScalarFn(a.i0), in[0], a.f0);
    case OpKind::clamp: return clamp(in[0], a.f0, a.f1);
    case OpKind::unary: return unary(UnaryFn(a.i0), in[0]);
    case OpKind::softmax: return softmax(in[0], a.i0);
    case OpKind::layer_norm: return layer_norm(in[0], opt(1), opt(2), a.f0);
    case OpKind::rms_norm: return rms_norm(in[0], opt(1), a.f0);
    case OpKind::group_norm: return then_silu(group_norm(in[0], a.i0, opt(1), opt(2), a.f0));
    case OpKind::channel_norm: return then_silu(channel_norm(in[0], opt(1), a.f0, a.f1));
    case OpKind::rope: return rope(in[0], in[1], in[2]);
    case OpKind::sdpa: {
      const bool bool_mask = c.inputs.size() > 3 && c.inputs[3].defined() &&
                             c.inputs[3].dtype() == DType::boolean;
      return sdpa(in[0], in[1], in[2], opt(3), bool_mask, a.f0);
    }
    case OpKind::conv2d: {
      Array y = conv2d(in[0], in[1], opt(2), a.ints[0], a.ints[1], a.ints[2], a.ints[3], a.ints[4]);
      if (!opt(3).defined) return y;
      round_to(y, c.inputs[0].dtype());  // the conv's output, then the residual add
      for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += in[3].v[i];
      return y;
    }
    case OpKind::upsample_nearest2x: return upsample_nearest2x(in[0]);
    case OpKind::concat: return concat(in, a.i0);
    case OpKind::embedding: return embedding(in[0], in[1]);
    case OpKind::reduce: return reduce(ReduceFn(a.i0), in[0], a.ints, a.flag);
    case OpKind::absmax_blocks: return absmax_blocks(in[0], a.i0);
    case OpKind::linear_q:  // the scheme's reference dequantization, then the f64 linear
      return linear(in[0], from_tensor(a.packed->dequantize(DType::f32).to(Device::cpu())), opt(1));
    case OpKind::mul_add: {  // the product in f64 (exact for f32 inputs), rounded to the output dtype on request
      Array p = binary(BinaryFn::mul, in[0], in[1], false);
      if (a.flag) round_to(p, a.dtype);
      return binary(BinaryFn::add, p, in[2], false);
    }
    case OpKind::rms_norm_rope: {  // each segment's norm rounded to x's dtype, concatenated, then rope
      std::vector<Array> normed;
      for (size_t i = 2; i + 1 < in.size(); i += 2) {
        normed.push_back(rms_norm(in[i], opt(i + 1), a.f0));
        round_to(normed.back(), c.inputs[2].dtype());
      }
      return rope(concat(normed, 1), in[0], in[1]);
    }
    case OpKind::count_: break;
  }
  fail("reference", "unknown op kind ", int(c.kind));
}

}  // namespace diffq::reference
