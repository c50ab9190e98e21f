#include "backend/cpu/quant/int8_dynamic_linear.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/int8_act_quant.h"
#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/int8_gemm_amx.h"
#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/torchao/affine.h"
#include "quant/torchao/affine_int8_weight.h"

namespace diffq::backend::cpu {

using quant::torchao::AffineInt8Weight;
using quant::torchao::choose_qparams;
using quant::torchao::Granularity;
using quant::torchao::MappingType;
using quant::torchao::reciprocal_in;

void quantize_activations_int8(const float* x, int64_t m, int64_t k, DType dt, bool per_tensor, int8_t* q,
                               std::vector<float>& scale) {
  auto params = [&](float mn, float mx) {
    return choose_qparams(mn, mx, MappingType::Symmetric, -128, 127, FLT_EPSILON, dt).scale;
  };
  // clamp(round(x * (1/s)) + 0, -128, 127) in f32; NaN (e.g. an inf input) -> 0 as the cast does
  auto quantize_row = [&](int64_t r, float s) {
    int8_quantize_row_reference(x + r * k, DType::f32, k, reciprocal_in(DType::f32, s), q + r * k);
  };
  if (per_tensor) {
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < m * k; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
    scale.assign(1, params(mn, mx));
    core::parallel_for(m, 8, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) quantize_row(r, scale[0]);
    });
    return;
  }
  scale.assign(size_t(m), 0.0f);
  core::parallel_for(m, 8, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const float am = int8_row_abs_max_reference(x + r * k, DType::f32, k);
      scale[size_t(r)] = params(-am, am);
      quantize_row(r, scale[size_t(r)]);
    }
  });
}

namespace {

// Per-call buffers, kept per calling thread (no heap traffic in the steady state).
thread_local std::vector<float> ws, bv, xs, absmax;
// (64-byte aligned: oneDNN's AMX tile loads of rows at a 16-byte offset from a cache line read two lines
// per tile row and ran the int8 GEMM markedly slower on an AMX Xeon)
thread_local AlignedBuffer<int16_t> apack;
thread_local AlignedBuffer<int8_t> arows;

// One call's quantized activations (int8 rows where oneDNN runs the product, else the tile's packed
// strips) and the GEMM's epilogue (scales, bias, x's dtype), pointing into this thread's buffers; ep.y is
// left for the caller.
struct Int8Call {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* rows = nullptr;    // [m, k] row-major at row stride lda (amx: in the AMX tiles' form)
  int64_t lda = 0;
  bool amx = false;
  const int16_t* strips = nullptr;  // else
  Int8Epilogue ep;
};

Int8Call prepare(const Tensor& x, const Tensor& bias, const AffineInt8Weight& w) {
  const int64_t n = w.shape()[0], k = w.shape()[1];
  check(x.dim() >= 1 && x.shape().back() == k, "torchao.int8dq", "input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", k);
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "torchao.int8dq",
        "input dtype ", dtype_name(x.dtype()), " is not float32, bfloat16 or float16");
  check(w.block_cols() == k, "torchao.int8dq", "weight scale must be per row or per tensor, got block_size [",
        w.block_rows(), ", ", w.block_cols(), "]");
  if (bias.defined()) check(bias.dim() == 1 && bias.shape()[0] == n, "torchao.int8dq", "bias must be [", n, "]");
  ws.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    ws[size_t(j)] = w.scale_at(j, 0);
    check(w.zero_at(j, 0) == 0, "torchao.int8dq", "weight row ", j, " has zero_point ", w.zero_at(j, 0),
          " (the dynamic int8 linear needs a symmetric weight)");
  }
  const DType dt = x.dtype();
  // f32 and bf16 rows are read in place; f16 is widened first (exact either way).
  const Tensor xc = dt == DType::f16 ? x.to(DType::f32).contiguous() : x.contiguous();
  const DType src = xc.dtype();
  const size_t esize = src == DType::bf16 ? 2 : 4;
  const auto* xp = static_cast<const uint8_t*>(xc.data_ptr());
  const int64_t m = xc.numel() / std::max<int64_t>(k, 1);
  const bool per_tensor = w.act_granularity()->type == Granularity::PerTensor;
  auto params = [&](float mn, float mx) {
    return choose_qparams(mn, mx, MappingType::Symmetric, -128, 127, FLT_EPSILON, dt).scale;
  };
  auto row = [&](int64_t i) -> const void* { return xp + size_t(i * k) * esize; };

  // Activations -> A in the form the GEMM reads (int8 rows for oneDNN, else strips of 6 rows), scales
  // per token or per tensor.
  const bool as_rows = int8_uses_onednn() || int8_uses_amx();
  // Rows for the AMX tiles: a stride of k rounded up to 64, zero-padded, zero rows up to a multiple of 32.
  const bool amx = int8_rows_use_amx(m, w.shape()[0], k);
  const int64_t lda = amx ? amx_int8_lda(k) : k, alloc_rows = amx ? amx_int8_rows(m) : m;
  const int64_t strips = (m + kInt8StripRows - 1) / kInt8StripRows, se = int8_packed_strip_elems(k);
  int16_t* const ap = as_rows ? nullptr : apack.get(int8_packed_a_elems(m, k));
  int8_t* const aq = as_rows ? arows.get(size_t(alloc_rows * lda)) : nullptr;
  xs.resize(per_tensor ? 1 : size_t(m));
  // (thread_local names inside the parallel bodies would be the workers' own: use these pointers)
  float* const xsp = xs.data();
  // Symmetric: the scale depends on the rows' min and max only through the largest magnitude.
  if (per_tensor) {
    absmax.resize(size_t(m));
    float* const amp = absmax.data();
    core::parallel_for(m, 8, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) amp[i] = int8_row_abs_max(row(i), src, k);
    });
    float am = 0.0f;
    for (int64_t i = 0; i < m; ++i) am = std::max(am, amp[i]);
    xsp[0] = params(-am, am);
  }
  auto row_scale = [&](int64_t i) {
    if (!per_tensor) {
      const float am = int8_row_abs_max(row(i), src, k);
      xsp[i] = params(-am, am);
    }
    return reciprocal_in(DType::f32, xsp[per_tensor ? 0 : i]);
  };
  if (as_rows) {
    core::parallel_for(m, 8, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        int8_quantize_row(row(i), src, k, row_scale(i), aq + i * lda);
        std::fill(aq + i * lda + k, aq + (i + 1) * lda, int8_t(0));
      }
    });
    std::fill(aq + m * lda, aq + alloc_rows * lda, int8_t(0));
  } else {
    core::parallel_for(strips, 2, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s)
        for (int64_t r = 0; r < kInt8StripRows; ++r) {
          const int64_t i = s * kInt8StripRows + r;
          int16_t* strip = ap + s * se;
          if (i >= m) {
            int8_quantize_row_packed(nullptr, src, k, 0.0f, strip, r);
            continue;
          }
          int8_quantize_row_packed(row(i), src, k, row_scale(i), strip, r);
        }
    });
  }

  // The int8 GEMM's scale / bias / cast epilogue, fused into its tile stores.
  if (bias.defined()) {
    bv.resize(size_t(n));
    const Tensor bf = bias.to(DType::f32).contiguous();
    std::copy(bf.data<float>(), bf.data<float>() + n, bv.begin());
  }
  Int8Call c;
  c.m = m, c.n = n, c.k = k;
  if (as_rows)
    c.rows = aq, c.lda = lda, c.amx = amx;
  else
    c.strips = ap;
  c.ep.row_scale = xs.data();
  c.ep.per_tensor = per_tensor;
  c.ep.col_scale = ws.data();
  c.ep.bias = bias.defined() ? bv.data() : nullptr;
  c.ep.out = dt;
  return c;
}

}  // namespace

Tensor int8_dynamic_linear(const Tensor& x, const Tensor& bias, const AffineInt8Weight& w,
                           std::optional<ops::UnaryFn> act) {
  Int8Call c = prepare(x, bias, w);
  c.ep.act = act;
  Shape out_shape = x.shape();
  out_shape.back() = c.n;
  Tensor y = Tensor::empty(out_shape, x.dtype());
  c.ep.y = y.data_ptr();
  c.ep.ldy = c.n;
  const int8_t* wq = w.qdata().data<int8_t>();
  if (c.rows)
    gemm_s8s8_rows(c.m, c.n, c.k, c.rows, c.lda, wq, c.k, nullptr, 0, &c.ep, c.amx);
  else
    gemm_s8s8_packed(c.m, c.n, c.k, c.strips, wq, c.k, nullptr, 0, &c.ep);
  return y;
}

void int8_dynamic_linear_parts(const Tensor& x, const Tensor& bias, const AffineInt8Weight& w,
                               const GemmParts& parts) {
  const Int8Call c = prepare(x, bias, w);
  const int8_t* wq = w.qdata().data<int8_t>();
  if (c.rows)
    gemm_s8s8_rows_parts(c.m, c.n, c.k, c.rows, c.lda, wq, c.k, c.ep, parts, c.amx);
  else
    gemm_s8s8_packed_parts(c.m, c.n, c.k, c.strips, wq, c.k, c.ep, parts);
}

}  // namespace diffq::backend::cpu
