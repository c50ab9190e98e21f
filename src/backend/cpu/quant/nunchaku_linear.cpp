#include "backend/cpu/quant/nunchaku_linear.h"

#include <vector>

#include "backend/cpu/int8_gemm.h"
#include "core/thread_pool.h"
#include "quant/nunchaku/nunchaku.h"

namespace diffq::backend::cpu {

Tensor svdq_w4a4_linear(const quant::nunchaku::SvdqW4A4Weight& w, const Tensor& x, const Tensor& bias) {
  w.check_input(x);
  const int64_t n = w.shape()[0], k = w.shape()[1], g = k / 64, r = w.rank();
  const Tensor xf = x.to(DType::f32).contiguous();
  const float* xp = xf.data<float>();
  const int64_t m = xf.numel() / k;
  std::vector<int8_t> q(size_t(m * k));
  std::vector<float> as(size_t(m * g));
  w.quantize_activations(xp, m, q.data(), as.data());
  const auto b = w.logical_bias(bias);
  const int8_t* c = w.codes().data<int8_t>();
  const float* ws = w.wscales().data<float>();
  const float* dn = w.down().data<float>();
  const float* up = w.up().data<float>();
  Shape os = x.shape();
  os.back() = n;
  Tensor y = Tensor::zeros(os, DType::f32);
  float* yo = y.data<float>();
  std::vector<int32_t> cg(size_t(m * n));
  for (int64_t gi = 0; gi < g; ++gi) {
    gemm_s8s8s32(m, n, 64, q.data() + gi * 64, k, c + gi * 64, k, cg.data(), n);
    core::parallel_for(m, 16, [&](int64_t a, int64_t e) {
      for (int64_t t = a; t < e; ++t) {
        const float at = as[size_t(t * g + gi)];
        for (int64_t i = 0; i < n; ++i) yo[t * n + i] += float(cg[size_t(t * n + i)]) * at * ws[gi * n + i];
      }
    });
  }
  core::parallel_for(m, 16, [&](int64_t a, int64_t e) {
    std::vector<float> la(static_cast<size_t>(r));
    for (int64_t t = a; t < e; ++t) {
      for (int64_t j = 0; j < r; ++j) {
        float s = 0;
        for (int64_t i = 0; i < k; ++i) s += xp[t * k + i] * dn[j * k + i];
        la[size_t(j)] = s;
      }
      for (int64_t i = 0; i < n; ++i) {
        float lr = 0;
        for (int64_t j = 0; j < r; ++j) lr += la[size_t(j)] * up[i * r + j];
        yo[t * n + i] = yo[t * n + i] + lr + b[size_t(i)];
      }
    }
  });
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

}  // namespace diffq::backend::cpu
