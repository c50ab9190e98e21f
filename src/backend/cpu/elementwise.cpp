// binary (numpy broadcasting), scalar and clamp. Float results are computed in f32 and rounded once
// to the output dtype (a's dtype); when both inputs are integers the arithmetic is exact in int64.
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"
#include "diffq/error.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class Op>
HWY_INLINE void BinaryLoop(const float* a, bool a_bcast, const float* b, bool b_bcast, float* y,
                           int64_t n, Op op) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va0 = hn::Set(d, a[0]), vb0 = hn::Set(d, b[0]);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto va = a_bcast ? va0 : hn::LoadU(d, a + i);
    const auto vb = b_bcast ? vb0 : hn::LoadU(d, b + i);
    hn::StoreU(op(d, va, vb), d, y + i);
  }
  if (i < n) {
    const size_t rem = size_t(n - i);
    const auto va = a_bcast ? va0 : LoadTail(d, a + i, rem);
    const auto vb = b_bcast ? vb0 : LoadTail(d, b + i, rem);
    StoreTail(op(d, va, vb), d, y + i, rem);
  }
}

// NaN-propagating max/min as torch.maximum/minimum.
template <class D, class V>
HWY_INLINE V MaxNaN(D, V a, V b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
}
template <class D, class V>
HWY_INLINE V MinNaN(D, V a, V b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
}

void BinaryF32(int64_t fn, const float* a, bool a_bcast, const float* b, bool b_bcast, float* y,
               int64_t n) {
  switch (fn) {
    case 0: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto, auto x, auto z) { return hn::Add(x, z); });
    case 1: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto, auto x, auto z) { return hn::Sub(x, z); });
    case 2: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto, auto x, auto z) { return hn::Mul(x, z); });
    case 3: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto, auto x, auto z) { return hn::Div(x, z); });
    case 4: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto d, auto x, auto z) { return MaxNaN(d, x, z); });
    default: return BinaryLoop(a, a_bcast, b, b_bcast, y, n, [](auto d, auto x, auto z) { return MinNaN(d, x, z); });
  }
}

// y = bf16(a op b) for n bf16 elements of unit stride: BinaryF32's arithmetic on the exactly widened
// values, rounded as store_f32 rounds, in registers (no f32 staging rows).
template <class F>
HWY_INLINE void Bf16Loop(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n, F f) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) StoreBf16(d, f(d, LoadBf16(d, a + i), LoadBf16(d, b + i)), y + i);
  if (i == n) return;
  HWY_ALIGN uint16_t ta[kMaxFloatLanes] = {}, tb[kMaxFloatLanes] = {}, ty[kMaxFloatLanes];
  std::memcpy(ta, a + i, size_t(n - i) * 2);
  std::memcpy(tb, b + i, size_t(n - i) * 2);
  StoreBf16(d, f(d, LoadBf16(d, ta), LoadBf16(d, tb)), ty);
  std::memcpy(y + i, ty, size_t(n - i) * 2);
}

void BinaryBf16(int64_t fn, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  switch (fn) {
    case 0: return Bf16Loop(a, b, y, n, [](auto, auto x, auto z) { return hn::Add(x, z); });
    case 1: return Bf16Loop(a, b, y, n, [](auto, auto x, auto z) { return hn::Sub(x, z); });
    case 2: return Bf16Loop(a, b, y, n, [](auto, auto x, auto z) { return hn::Mul(x, z); });
    case 3: return Bf16Loop(a, b, y, n, [](auto, auto x, auto z) { return hn::Div(x, z); });
    case 4: return Bf16Loop(a, b, y, n, [](auto d, auto x, auto z) { return MaxNaN(d, x, z); });
    default: return Bf16Loop(a, b, y, n, [](auto d, auto x, auto z) { return MinNaN(d, x, z); });
  }
}

// y = x*mul + add (covers add, mul and rsub scalars), then clamp to [lo, hi] when clamp is set.
void AffineClampF32(const float* x, float* y, int64_t n, float mul, float add, bool clamp, float lo,
                    float hi) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, mul), va = hn::Set(d, add), vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  auto body = [&](auto v) {
    if (!clamp) return hn::MulAdd(v, vm, va);
    // NaN stays NaN (torch.clamp); Min/Max of x86 return the second operand on NaN.
    const auto c = hn::Min(hn::Max(v, vlo), vhi);
    return hn::IfThenElse(hn::IsNaN(v), v, c);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(body(hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(body(LoadTail(d, x + i, size_t(n - i))), d, y + i, size_t(n - i));
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(BinaryF32);
HWY_EXPORT(BinaryBf16);
HWY_EXPORT(AffineClampF32);

void binary_row_bf16(ops::BinaryFn fn, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryBf16)(int64_t(fn), a, b, y, n);
}

void binary_row_f32(ops::BinaryFn fn, const float* a, bool a_bcast, const float* b, bool b_bcast, float* y,
                    int64_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryF32)(int64_t(fn), a, a_bcast, b, b_bcast, y, n);
}

void add_row_into(DType dt, const void* r, void* y, int64_t n) {
  if (dt == DType::bf16) {
    binary_row_bf16(ops::BinaryFn::add, static_cast<const uint16_t*>(r), static_cast<const uint16_t*>(y),
                    static_cast<uint16_t*>(y), n);
    return;
  }
  if (dt == DType::f32) {
    HWY_DYNAMIC_DISPATCH(BinaryF32)(int64_t(ops::BinaryFn::add), static_cast<const float*>(r), false,
                                    static_cast<const float*>(y), false, static_cast<float*>(y), n);
    return;
  }
  const int64_t es = int64_t(dtype_size(dt));
  float rb[kMapChunk], yb[kMapChunk];
  for (int64_t i = 0; i < n; i += kMapChunk) {
    const int64_t len = std::min(kMapChunk, n - i);
    load_f32(static_cast<const uint8_t*>(r) + i * es, dt, 1, rb, len);
    load_f32(static_cast<uint8_t*>(y) + i * es, dt, 1, yb, len);
    HWY_DYNAMIC_DISPATCH(BinaryF32)(int64_t(ops::BinaryFn::add), rb, false, yb, false, yb, len);
    store_f32(yb, static_cast<uint8_t*>(y) + i * es, dt, len);
  }
}
void affine_clamp_row_f32(const float* x, float* y, int64_t n, float mul, float add, bool clamp, float lo,
                          float hi) {
  HWY_DYNAMIC_DISPATCH(AffineClampF32)(x, y, n, mul, add, clamp, lo, hi);
}

namespace {

int64_t int_binary(ops::BinaryFn fn, int64_t a, int64_t b) {
  switch (fn) {
    case ops::BinaryFn::add: return int64_t(uint64_t(a) + uint64_t(b));
    case ops::BinaryFn::sub: return int64_t(uint64_t(a) - uint64_t(b));
    case ops::BinaryFn::mul: return int64_t(uint64_t(a) * uint64_t(b));
    case ops::BinaryFn::div:
      check(b != 0, "binary", "integer division by zero");
      if (b == -1) return int64_t(0 - uint64_t(a));  // avoids INT64_MIN / -1
      return a / b;                                   // truncates toward zero
    case ops::BinaryFn::maximum: return std::max(a, b);
    case ops::BinaryFn::minimum: return std::min(a, b);
  }
  return 0;
}

void binary_kernel(const OpCall& c, Tensor& out) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const auto fn = ops::BinaryFn(c.attrs.i0);
  Shape shape = out.shape();
  std::vector<Shape> st = {broadcast_strides(a, shape), broadcast_strides(b, shape),
                           contiguous_strides(shape)};
  coalesce_dims(shape, st);
  const RowIterator ra(shape, st[0]), rb(shape, st[1]);
  const int64_t len = ra.row_len(), per_row = (len + kMapChunk - 1) / kMapChunk;
  const int64_t sa = ra.row_stride(), sb = rb.row_stride();
  const DType at = a.dtype(), bt = b.dtype(), ot = out.dtype();
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const int64_t oes = int64_t(dtype_size(ot));

  if (is_integer_like(at) && is_integer_like(bt)) {
    parallel_for(ra.num_rows() * per_row, 2, [&](int64_t beg, int64_t end) {
      for (int64_t it = beg; it < end; ++it) {
        const int64_t r = it / per_row, c0 = (it % per_row) * kMapChunk, n = std::min(kMapChunk, len - c0);
        const int64_t oa = a.offset() + ra.row_offset(r) + c0 * sa, ob = b.offset() + rb.row_offset(r) + c0 * sb;
        for (int64_t i = 0; i < n; ++i)
          store_int(dst, ot, r * len + c0 + i,
                    int_binary(fn, load_int(a.storage()->data(), at, oa + i * sa),
                               load_int(b.storage()->data(), bt, ob + i * sb)));
      }
    });
    return;
  }

  if (at == DType::bf16 && bt == DType::bf16 && ot == DType::bf16 && sa == 1 && sb == 1) {
    // bf16 rows of unit stride (the residual adds): widened and rounded in registers.
    parallel_for(ra.num_rows() * per_row, 2, [&](int64_t beg, int64_t end) {
      for (int64_t it = beg; it < end; ++it) {
        const int64_t r = it / per_row, c0 = (it % per_row) * kMapChunk, n = std::min(kMapChunk, len - c0);
        binary_row_bf16(
            fn, reinterpret_cast<const uint16_t*>(elem_ptr(a, a.offset() + ra.row_offset(r) + c0)),
            reinterpret_cast<const uint16_t*>(elem_ptr(b, b.offset() + rb.row_offset(r) + c0)),
            reinterpret_cast<uint16_t*>(dst) + r * len + c0, n);
      }
    });
    return;
  }
  parallel_for(ra.num_rows() * per_row, 2, [&](int64_t beg, int64_t end) {
    float abuf[kMapChunk], bbuf[kMapChunk], ybuf[kMapChunk];
    for (int64_t it = beg; it < end; ++it) {
      const int64_t r = it / per_row, c0 = (it % per_row) * kMapChunk, n = std::min(kMapChunk, len - c0);
      const float* pa = f32_chunk(a, ra.row_offset(r), c0, sa, n, abuf);
      const float* pb = f32_chunk(b, rb.row_offset(r), c0, sb, n, bbuf);
      const int64_t o = r * len + c0;
      float* y = ot == DType::f32 ? reinterpret_cast<float*>(dst) + o : ybuf;
      HWY_DYNAMIC_DISPATCH(BinaryF32)(int64_t(fn), pa, sa == 0, pb, sb == 0, y, n);
      if (ot != DType::f32) store_f32(ybuf, dst + o * oes, ot, n);
    }
  });
}

// Integer inputs: exact int64 arithmetic for integral scalars, else via double (then truncated).
void integer_map(const Tensor& x, Tensor& out, const std::function<double(double)>& fd,
                 const std::function<int64_t(int64_t)>* fi) {
  Shape shape = x.shape();
  std::vector<Shape> st = {x.strides(), contiguous_strides(shape)};
  coalesce_dims(shape, st);
  const RowIterator rows(shape, st[0]);
  const int64_t len = rows.row_len();
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 4096 / len), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t off = x.offset() + rows.row_offset(r);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t src = off + i * rows.row_stride(), o = r * len + i;
        if (fi) store_int(out.data_ptr(), out.dtype(), o, (*fi)(load_int(x.storage()->data(), x.dtype(), src)));
        else store_from_double(out.data_ptr(), out.dtype(), o, fd(load_as_double(x.storage()->data(), x.dtype(), src)));
      }
    }
  });
}

void scalar_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const auto fn = ops::ScalarFn(c.attrs.i0);
  const double s = c.attrs.f0;
  if (is_integer_like(x.dtype())) {
    const bool integral = s == std::trunc(s) && std::fabs(s) < 9.0e15;
    const int64_t si = integral ? int64_t(s) : 0;
    std::function<int64_t(int64_t)> fi = [&](int64_t v) -> int64_t {
      switch (fn) {
        case ops::ScalarFn::add: return int64_t(uint64_t(v) + uint64_t(si));
        case ops::ScalarFn::mul: return int64_t(uint64_t(v) * uint64_t(si));
        case ops::ScalarFn::rsub: return int64_t(uint64_t(si) - uint64_t(v));
        case ops::ScalarFn::pow: break;
      }
      return 0;
    };
    auto fd = [&](double v) {
      switch (fn) {
        case ops::ScalarFn::add: return v + s;
        case ops::ScalarFn::mul: return v * s;
        case ops::ScalarFn::rsub: return s - v;
        case ops::ScalarFn::pow: return std::pow(v, s);
      }
      return 0.0;
    };
    integer_map(x, out, fd, integral && fn != ops::ScalarFn::pow ? &fi : nullptr);
    return;
  }
  const float sf = float(s);
  switch (fn) {
    case ops::ScalarFn::add:
    case ops::ScalarFn::mul:
    case ops::ScalarFn::rsub: {
      const float mul = fn == ops::ScalarFn::add ? 1.f : fn == ops::ScalarFn::mul ? sf : -1.f;
      const float add = fn == ops::ScalarFn::mul ? 0.f : sf;
      // x*s exactly as torch (mul then no add): MulAdd with add 0 is exact; x+s: x*1+s exact.
      map_f32(x, out, [&](const float* in, float* y, int64_t n) {
        HWY_DYNAMIC_DISPATCH(AffineClampF32)(in, y, n, mul, add, false, 0.f, 0.f);
      });
      return;
    }
    case ops::ScalarFn::pow:
      map_f32(x, out, [&](const float* in, float* y, int64_t n) {
        if (s == 2.0) {
          for (int64_t i = 0; i < n; ++i) y[i] = in[i] * in[i];
        } else if (s == 0.5) {
          for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(in[i]);
        } else if (s == 1.0) {
          for (int64_t i = 0; i < n; ++i) y[i] = in[i];
        } else {
          for (int64_t i = 0; i < n; ++i) y[i] = std::pow(in[i], sf);
        }
      });
      return;
  }
}

void clamp_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const double lo = c.attrs.f0, hi = c.attrs.f1;
  if (is_integer_like(x.dtype())) {
    integer_map(x, out, [&](double v) { return std::min(std::max(v, lo), hi); }, nullptr);
    return;
  }
  map_f32(x, out, [&](const float* in, float* y, int64_t n) {
    HWY_DYNAMIC_DISPATCH(AffineClampF32)(in, y, n, 1.f, 0.f, true, float(lo), float(hi));
  });
}

}  // namespace

void register_elementwise_kernels() {
  ops::register_kernel(OpKind::binary, DeviceKind::cpu, binary_kernel);
  ops::register_kernel(OpKind::scalar, DeviceKind::cpu, scalar_kernel);
  ops::register_kernel(OpKind::clamp, DeviceKind::cpu, clamp_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
