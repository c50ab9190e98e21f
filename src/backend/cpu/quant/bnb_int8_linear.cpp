#include "backend/cpu/quant/bnb_int8_linear.h"

#include <vector>

#include "backend/cpu/quant/tile_linear.h"
#include "core/thread_pool.h"
#include "quant/bnb/bnb_int8.h"

namespace diffq::backend::cpu {

using quant::bnb::kInv127;
using quant::bnb::kInv127Sq;

Tensor llm_int8_linear(const quant::Bnb8bitWeight& w, const Tensor& x, const Tensor& bias) {
  w.check_input(x, bias);
  const Tensor& cb = w.cb();
  const int64_t N = cb.shape()[0], K = cb.shape()[1];
  const DType dt = x.dtype();
  const int64_t M = x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const Tensor xf = x.to(DType::f32).contiguous();             // x's own values
  const Tensor xh = x.to(DType::f16).to(DType::f32).contiguous();  // A.to(float16)
  const float* xp = xf.data<float>();

  std::vector<int8_t> ca(static_cast<size_t>(M * K));
  std::vector<float> rs(static_cast<size_t>(M));
  std::vector<int64_t> cols;
  quant::bnb::int8_vectorwise_quant(xh.data<float>(), M, K, w.threshold(), ca.data(), rs.data(), &cols);

  // int32 product q_x q_w^T through the float32 GEMM (exact below 2^24, as bitsandbytes' own).
  Tensor caf = Tensor::empty({M, K}, DType::f32);
  float* cap = caf.data<float>();
  for (int64_t i = 0; i < M * K; ++i) cap[i] = float(ca[size_t(i)]);
  const int8_t* q = cb.data<int8_t>();
  const Tensor acc = dequant_tile_linear(caf, {}, N, K, [q, K](int64_t n0, int64_t n1, float* dst) {
    for (int64_t i = n0 * K; i < n1 * K; ++i) *dst++ = float(q[i]);
  });
  const float* ap = acc.data<float>();
  const float* scb = w.scb().data<float>();
  std::vector<float> bf;
  if (bias.defined()) bf = bias.to(dt).to_f32_vector();  // Linear8bitLt casts the bias to x's dtype

  // Outlier columns: x[:, cols] (x's dtype) against the dequantized weight columns rounded to x's dtype.
  std::vector<float> subb;
  if (!cols.empty()) {
    subb.resize(size_t(N) * cols.size());
    for (int64_t n = 0; n < N; ++n)
      for (size_t c = 0; c < cols.size(); ++c) {
        const float v = float(q[n * K + cols[c]]) * scb[n];
        subb[size_t(n) * cols.size() + c] = round_through(dt, v * kInv127);
      }
  }
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  core::parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float c32 = float(int32_t(ap[m * N + n]));
        float v = c32 * (rs[size_t(m)] * scb[n]);
        v = v * kInv127Sq;
        if (!bf.empty()) v = v + bf[size_t(n)];
        v = round_through(dt, v);
        if (!cols.empty()) {
          float s = 0.0f;
          for (size_t c = 0; c < cols.size(); ++c) s += xp[m * K + cols[c]] * subb[size_t(n) * cols.size() + c];
          v = round_through(dt, v + s);
        }
        yp[m * N + n] = v;
      }
  });
  return dt == DType::f32 ? y : y.to(dt);
}

}  // namespace diffq::backend::cpu
