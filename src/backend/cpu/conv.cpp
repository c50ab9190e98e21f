// conv2d as GEMM: out_n[O, Ho*Wo] = W[O, C*kh*kw] @ col[C*kh*kw, pixels]. col (im2col) is built for a
// bounded chunk of output rows at a time (<= kColBytes), so memory stays small for large images; a
// 1x1 stride-1 unpadded conv multiplies the input directly. f32 accumulation, one rounding at the end.
#include <cstring>

#include "backend/cpu/common.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threads.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kColBytes = int64_t(4) << 20;

void conv2d_kernel(const OpCall& c, Tensor& out) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
  const int64_t s = c.attrs.ints[0], pl = c.attrs.ints[1], pt = c.attrs.ints[3];
  const int64_t Ho = out.size(2), Wo = out.size(3), P = Ho * Wo, Kd = C * KH * KW;
  const F32Input wf(w);
  std::unique_ptr<F32Input> bf = bias.defined() ? std::make_unique<F32Input>(bias) : nullptr;
  const bool direct_1x1 = KH == 1 && KW == 1 && s == 1 && Ho == H && Wo == W && pl == 0 && pt == 0;
  const bool x_direct = x.dtype() == DType::f32 && x.is_contiguous();
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));

  std::unique_ptr<float[]> xbuf = x_direct ? nullptr : alloc_f32(C * H * W);
  std::unique_ptr<float[]> ybuf = ot == DType::f32 ? nullptr : alloc_f32(O * P);
  const int64_t rows_per_chunk =
      std::max<int64_t>(1, std::min<int64_t>(Ho, kColBytes / std::max<int64_t>(Kd * Wo * 4, 1)));
  std::unique_ptr<float[]> col = direct_1x1 ? nullptr : alloc_f32(Kd * rows_per_chunk * Wo);

  for (int64_t n = 0; n < N; ++n) {
    const float* xn = x_direct ? x.data<float>() + n * C * H * W : xbuf.get();
    if (!x_direct) gather_f32(x.select(0, n), xbuf.get());
    float* yn = ot == DType::f32 ? out.data<float>() + n * O * P : ybuf.get();
    // Bias first, then GEMMs accumulate onto it.
    parallel_for(O, std::max<int64_t>(1, 16384 / std::max<int64_t>(P, 1)), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) std::fill(yn + o * P, yn + (o + 1) * P, bf ? bf->data()[o] : 0.f);
    });
    if (direct_1x1) {
      sgemm(false, false, O, P, C, 1.f, wf.data(), C, xn, P, 1.f, yn, P);
    } else {
      for (int64_t oy0 = 0; oy0 < Ho; oy0 += rows_per_chunk) {
        const int64_t nr = std::min(rows_per_chunk, Ho - oy0), cols = nr * Wo;
        parallel_for(Kd, 1, [&](int64_t k0, int64_t k1) {
          for (int64_t kk = k0; kk < k1; ++kk) {
            const int64_t ch = kk / (KH * KW), ky = (kk / KW) % KH, kx = kk % KW;
            float* dstrow = col.get() + kk * cols;
            for (int64_t r = 0; r < nr; ++r) {
              const int64_t iy = (oy0 + r) * s + ky - pt;
              float* d = dstrow + r * Wo;
              if (iy < 0 || iy >= H) {
                std::fill(d, d + Wo, 0.f);
                continue;
              }
              const float* srow = xn + (ch * H + iy) * W;
              for (int64_t ox = 0; ox < Wo; ++ox) {
                const int64_t ix = ox * s + kx - pl;
                d[ox] = (ix >= 0 && ix < W) ? srow[ix] : 0.f;
              }
            }
          }
        });
        sgemm(false, false, O, cols, Kd, 1.f, wf.data(), Kd, col.get(), cols, 1.f, yn + oy0 * Wo, P);
      }
    }
    if (ot != DType::f32) {
      auto* dst = static_cast<uint8_t*>(out.data_ptr()) + n * O * P * oes;
      parallel_for(O, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) store_f32(yn + o * P, dst + o * P * oes, ot, P);
      });
    }
  }
}

}  // namespace

void register_conv_kernels() { ops::register_kernel(OpKind::conv2d, DeviceKind::cpu, conv2d_kernel); }

}  // namespace diffq::backend::cpu
