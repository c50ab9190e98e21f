#include "quant/torchao/int8_dynamic_linear.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/threads.h"
#include "diffq/error.h"
#include "quant/torchao/affine.h"
#include "quant/torchao/affine_int8_weight.h"

namespace diffq::quant::torchao {

namespace cpu = backend::cpu;

void quantize_activations_int8(const float* x, int64_t m, int64_t k, DType dt, bool per_tensor, int8_t* q,
                               std::vector<float>& scale) {
  auto params = [&](float mn, float mx) {
    return choose_qparams(mn, mx, MappingType::Symmetric, -128, 127, FLT_EPSILON, dt).scale;
  };
  auto quantize_row = [&](int64_t r, float s) {
    const float recip = reciprocal_in(DType::f32, s);
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    for (int64_t c = 0; c < k; ++c) {
      // clamp(round(x * (1/s)) + 0, -128, 127) in f32; NaN (e.g. an inf input) -> 0 as the cast does
      float v = std::nearbyint(xr[c] * recip);
      v = std::min(std::max(v, -128.0f), 127.0f);
      qr[c] = std::isnan(v) ? int8_t(0) : int8_t(v);
    }
  };
  if (per_tensor) {
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < m * k; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
    scale.assign(1, params(mn, mx));
    cpu::parallel_for(m, 8, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) quantize_row(r, scale[0]);
    });
    return;
  }
  scale.assign(size_t(m), 0.0f);
  cpu::parallel_for(m, 8, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const float* xr = x + r * k;
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t c = 0; c < k; ++c) mn = std::min(mn, xr[c]), mx = std::max(mx, xr[c]);
      scale[size_t(r)] = params(mn, mx);
      quantize_row(r, scale[size_t(r)]);
    }
  });
}

Tensor int8_dynamic_linear(const Tensor& x, const Tensor& bias, const AffineInt8Weight& w) {
  const int64_t n = w.shape()[0], k = w.shape()[1];
  check(x.dim() >= 1 && x.shape().back() == k, "torchao.int8dq", "input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", k);
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "torchao.int8dq",
        "input dtype ", dtype_name(x.dtype()), " is not float32, bfloat16 or float16");
  check(w.block_cols() == k, "torchao.int8dq", "weight scale must be per row or per tensor, got block_size [",
        w.block_rows(), ", ", w.block_cols(), "]");
  if (bias.defined()) check(bias.dim() == 1 && bias.shape()[0] == n, "torchao.int8dq", "bias must be [", n, "]");
  const DType dt = x.dtype();
  const Tensor xf = x.to(DType::f32).contiguous();
  const int64_t m = xf.numel() / std::max<int64_t>(k, 1);
  std::vector<int8_t> q(size_t(m * k));
  std::vector<float> xs;
  const bool per_tensor = w.act_granularity()->type == Granularity::PerTensor;
  quantize_activations_int8(xf.data<float>(), m, k, dt, per_tensor, q.data(), xs);
  std::vector<int32_t> c(size_t(m * n));
  cpu::gemm_s8s8s32(m, n, k, q.data(), k, w.qdata().data<int8_t>(), k, c.data(), n);

  std::vector<float> ws(static_cast<size_t>(n)), bv;
  for (int64_t j = 0; j < n; ++j) {
    ws[size_t(j)] = w.scale_at(j, 0);
    check(w.zero_at(j, 0) == 0, "torchao.int8dq", "weight row ", j, " has zero_point ", w.zero_at(j, 0),
          " (the dynamic int8 linear needs a symmetric weight)");
  }
  if (bias.defined()) bv = bias.to_f32_vector();
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  cpu::parallel_for(m, 16, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      const float sx = xs[per_tensor ? 0 : size_t(r)];
      const int32_t* cr = c.data() + r * n;
      float* yr = yp + r * n;
      for (int64_t j = 0; j < n; ++j) {
        float t = round_to(dt, float(cr[j]) * sx) * ws[size_t(j)];
        if (!bv.empty()) t += bv[size_t(j)];
        yr[j] = round_to(dt, t);
      }
    }
  });
  return dt == DType::f32 ? y : y.to(dt);
}

}  // namespace diffq::quant::torchao
