// mul_add (ops/op.h): y = a * b + c with numpy broadcasting over float inputs of any dtype, in f32 from
// the exactly widened inputs, the product rounded to y's dtype first where asked (round_product), the
// sum rounded once to y's dtype. One pass over the three operands instead of the two binary ops and the
// cast of the chains it replaces (a gated residual: two f32 tensors written and read back). Built with
// -ffp-contract=off (CMakeLists.txt): a fused multiply-add would skip the product's rounding those
// chains make.
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/mul_add.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[i] = a[i] * b[i] + c[i] over f32 rows (a broadcast operand: its element 0 everywhere); the product
// rounded to bf16 first when round_bf16.
void MulAddF32(const float* a, bool a_bcast, const float* b, bool b_bcast, const float* c, bool c_bcast,
               bool round_bf16, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va0 = hn::Set(d, a[0]), vb0 = hn::Set(d, b[0]), vc0 = hn::Set(d, c[0]);
  auto one = [&](hn::Vec<decltype(d)> va, hn::Vec<decltype(d)> vb, hn::Vec<decltype(d)> vc) {
    auto p = hn::Mul(va, vb);
    if (round_bf16) p = RoundToBf16(d, p);
    return hn::Add(p, vc);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(one(a_bcast ? va0 : hn::LoadU(d, a + i), b_bcast ? vb0 : hn::LoadU(d, b + i),
                   c_bcast ? vc0 : hn::LoadU(d, c + i)),
               d, y + i);
  if (i < n) {
    const size_t rem = size_t(n - i);
    StoreTail(one(a_bcast ? va0 : LoadTail(d, a + i, rem), b_bcast ? vb0 : LoadTail(d, b + i, rem),
                  c_bcast ? vc0 : LoadTail(d, c + i, rem)),
              d, y + i, rem);
  }
}

// MulAddF32 on bf16 rows (each operand unit-stride or broadcast), the sum stored as bf16 (StoreBf16's rounding):
// the same values as widening the rows, MulAddF32 and storing, in one pass.
void MulAddBf16(const uint16_t* a, bool a_bcast, const uint16_t* b, bool b_bcast, const uint16_t* c, bool c_bcast,
                bool round_bf16, uint16_t* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va0 = hn::Set(d, bf16_to_f32(a[0])), vb0 = hn::Set(d, bf16_to_f32(b[0]));
  const auto vc0 = hn::Set(d, bf16_to_f32(c[0]));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto p = hn::Mul(a_bcast ? va0 : LoadBf16(d, a + i), b_bcast ? vb0 : LoadBf16(d, b + i));
    if (round_bf16) p = RoundToBf16(d, p);
    StoreBf16(d, hn::Add(p, c_bcast ? vc0 : LoadBf16(d, c + i)), y + i);
  }
  for (; i < n; ++i) {
    float p = bf16_to_f32(a[a_bcast ? 0 : i]) * bf16_to_f32(b[b_bcast ? 0 : i]);
    if (round_bf16) p = bf16_to_f32(f32_to_bf16(p));
    y[i] = f32_to_bf16(p + bf16_to_f32(c[c_bcast ? 0 : i]));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(MulAddF32);
HWY_EXPORT(MulAddBf16);

void mul_add_row_reference(const float* a, bool a_bcast, const float* b, bool b_bcast, const float* c, bool c_bcast,
                           DType round_product_to, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float p = a[a_bcast ? 0 : i] * b[b_bcast ? 0 : i];
    if (round_product_to != DType::f32) p = round_through(round_product_to, p);
    y[i] = p + c[c_bcast ? 0 : i];
  }
}

namespace {

// Elements per row chunk: the three f32 operand chunks and the result stay in L1.
constexpr int64_t kChunk = 1024;

void mul_add_kernel(const OpCall& call, Tensor& out) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &c = call.inputs[2];
  const DType ot = out.dtype();  // floating, as every operand (ops/infer.cpp checked)
  // The product's rounding: none (f32 out, or not asked), bf16 on vectors, any other dtype per element.
  const DType round_to = call.attrs.flag ? ot : DType::f32;
  const bool vector_round = round_to == DType::f32 || round_to == DType::bf16;
  Shape shape = out.shape();
  std::vector<Shape> st = {broadcast_strides(a, shape), broadcast_strides(b, shape), broadcast_strides(c, shape),
                           contiguous_strides(shape)};
  coalesce_dims(shape, st);
  const RowIterator ra(shape, st[0]), rb(shape, st[1]), rc(shape, st[2]);
  const int64_t len = ra.row_len(), per_row = (len + kChunk - 1) / kChunk;
  const int64_t sa = ra.row_stride(), sb = rb.row_stride(), sc = rc.row_stride();
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const int64_t oes = int64_t(dtype_size(ot));
  // bf16 operands and result, rows unit-stride or broadcast: one pass over the bf16 rows (the same values).
  const auto unit_or_bcast = [](int64_t s) { return s == 0 || s == 1; };
  if (ot == DType::bf16 && a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && c.dtype() == DType::bf16 &&
      unit_or_bcast(sa) && unit_or_bcast(sb) && unit_or_bcast(sc)) {
    const auto bf16_fn = HWY_DYNAMIC_DISPATCH(MulAddBf16);
    const auto* pa = a.data<uint16_t>();
    const auto* pb = b.data<uint16_t>();
    const auto* pc = c.data<uint16_t>();
    auto* py = reinterpret_cast<uint16_t*>(dst);
    parallel_for(ra.num_rows() * per_row, 2, [&](int64_t beg, int64_t end) {
      for (int64_t it = beg; it < end; ++it) {
        const int64_t r = it / per_row, c0 = (it % per_row) * kChunk, n = std::min(kChunk, len - c0);
        bf16_fn(pa + ra.row_offset(r) + c0 * sa, sa == 0, pb + rb.row_offset(r) + c0 * sb, sb == 0,
                pc + rc.row_offset(r) + c0 * sc, sc == 0, call.attrs.flag, py + r * len + c0, n);
      }
    });
    return;
  }
  const auto row_fn = HWY_DYNAMIC_DISPATCH(MulAddF32);
  parallel_for(ra.num_rows() * per_row, 2, [&](int64_t beg, int64_t end) {
    alignas(64) float abuf[kChunk], bbuf[kChunk], cbuf[kChunk], ybuf[kChunk];
    for (int64_t it = beg; it < end; ++it) {
      const int64_t r = it / per_row, c0 = (it % per_row) * kChunk, n = std::min(kChunk, len - c0);
      const float* pa = f32_chunk(a, ra.row_offset(r), c0, sa, n, abuf);
      const float* pb = f32_chunk(b, rb.row_offset(r), c0, sb, n, bbuf);
      const float* pc = f32_chunk(c, rc.row_offset(r), c0, sc, n, cbuf);
      const int64_t o = r * len + c0;
      float* y = ot == DType::f32 ? reinterpret_cast<float*>(dst) + o : ybuf;
      if (vector_round)
        row_fn(pa, sa == 0, pb, sb == 0, pc, sc == 0, round_to == DType::bf16, y, n);
      else
        mul_add_row_reference(pa, sa == 0, pb, sb == 0, pc, sc == 0, round_to, y, n);
      if (ot != DType::f32) store_f32(ybuf, dst + o * oes, ot, n);
    }
  });
}

}  // namespace

void register_mul_add_kernel() { ops::register_kernel(OpKind::mul_add, DeviceKind::cpu, mul_add_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
