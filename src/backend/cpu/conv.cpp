// conv2d as GEMM: out_n[O, Ho*Wo] = W[O, C*kh*kw] @ col[C*kh*kw, pixels]. col (im2col) is built for a
// bounded chunk of output rows at a time (<= kColBytes), so memory stays small for large images; a
// 1x1 stride-1 unpadded conv multiplies the input directly. f32 accumulation into a chunk buffer, one
// rounding at the end.
// Where the bf16 GEMM is native (AVX512-BF16, AMX), a bf16 input with bf16 weights stays bf16 (gemm_bf16,
// as PyTorch's oneDNN convolution), stride-1 convs as implicit GEMMs over the padded input (no im2col);
// anything else is widened to f32.
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/channels_last.h"
#include "backend/cpu/common.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kColBytes = int64_t(4) << 20;

// oneDNN's convolution as the default without AMX (AVX-512 f32; AVX512-BF16 bf16): measured.
constexpr bool kOnednnConvF32 = false;
constexpr bool kOnednnConvBf16WithoutAmx = true;

// Rows [k0, k1) of im2col for output rows [oy0, oy0 + nr): col[kk * cols + r * Wo + ox] = x[ch, iy, ix]
// (zero outside the image), x one image [C, H, W] of T (float or bf16 bits).
template <class T>
void im2col_rows(const T* xn, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t s, int64_t pl, int64_t pt,
                 int64_t Wo, int64_t oy0, int64_t nr, int64_t k0, int64_t k1, T* col) {
  const int64_t cols = nr * Wo;
  for (int64_t kk = k0; kk < k1; ++kk) {
    const int64_t ch = kk / (KH * KW), ky = (kk / KW) % KH, kx = kk % KW;
    T* dstrow = col + kk * cols;
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t iy = (oy0 + r) * s + ky - pt;
      T* d = dstrow + r * Wo;
      if (iy < 0 || iy >= H) {
        std::fill(d, d + Wo, T(0));
        continue;
      }
      const T* srow = xn + (ch * H + iy) * W;
      // Output columns whose input column ox * s + kx - pl lies in [0, W): [lo, hi); zeros around.
      const int64_t lo = std::min(Wo, std::max<int64_t>(0, (pl - kx + s - 1) / s));
      const int64_t hi = std::max(lo, std::min(Wo, (W + pl - kx + s - 1) / s));
      std::fill(d, d + lo, T(0));
      if (s == 1) {
        std::memcpy(d + lo, srow + lo + kx - pl, size_t(hi - lo) * sizeof(T));
      } else {
        for (int64_t ox = lo; ox < hi; ++ox) d[ox] = srow[ox * s + kx - pl];
      }
      std::fill(d + hi, d + Wo, T(0));
    }
  }
}

// dst[0, n) = row + bias (bias: null or one value for the row), rounded to dt.
void bias_and_store(float* row, int64_t n, const float* bias, uint8_t* dst, DType dt) {
  if (bias)
    for (int64_t j = 0; j < n; ++j) row[j] += *bias;
  store_f32(row, dst, dt, n);
}

// yc[m, n] (row stride n) = W[m, k] @ B[k, n] (row stride ldb), f32 accumulation.
void conv_gemm(bool bf16, int64_t m, int64_t n, int64_t k, const void* w, const void* b, int64_t ldb, float* yc) {
  if (bf16)
    gemm_bf16(false, false, m, n, k, 1.f, static_cast<const uint16_t*>(w), k, static_cast<const uint16_t*>(b), ldb,
              0.f, yc, n);
  else
    sgemm(false, false, m, n, k, 1.f, static_cast<const float*>(w), k, static_cast<const float*>(b), ldb, 0.f, yc, n);
}

// The conv with W ([O, C * KH * KW]) and image n of x (image(n): [C, H, W], contiguous) in T. Output
// pixels go in chunks: im2col of the chunk (<= kColBytes; a 1x1 stride-1 conv reads x in place), one
// GEMM into a compact f32 chunk (its own row stride, so the tile's rows never alias in cache as rows of
// the whole image, P apart, would), then bias and the rounding to out's dtype, straight into out.
template <class T>
void conv2d_typed(const OpCall& c, Tensor& out, const std::function<const T*(int64_t)>& image, const T* w) {
  const Tensor &x = c.inputs[0], &wt = c.inputs[1];
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = wt.size(0), KH = wt.size(2), KW = wt.size(3);
  const int64_t s = c.attrs.ints[0], pl = c.attrs.ints[1], pt = c.attrs.ints[3];
  const int64_t Ho = out.size(2), Wo = out.size(3), P = Ho * Wo, Kd = C * KH * KW;
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  std::unique_ptr<F32Input> bf = bias.defined() ? std::make_unique<F32Input>(bias) : nullptr;
  const bool direct_1x1 = KH == 1 && KW == 1 && s == 1 && Ho == H && Wo == W && pl == 0 && pt == 0;
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  const int64_t depth_bytes = Kd * int64_t(sizeof(T));
  // A chunk: whole output rows (im2col) or any run of pixels (1x1).
  const int64_t per_col = std::max<int64_t>(depth_bytes, 1);
  const int64_t rows_fit = kColBytes / std::max<int64_t>(per_col * Wo, 1);
  const int64_t chunk = direct_1x1 ? std::max<int64_t>(256, std::min<int64_t>(P, kColBytes / per_col))
                                   : Wo * std::max<int64_t>(1, std::min<int64_t>(Ho, rows_fit));
  std::vector<T> col(direct_1x1 ? 0 : size_t(Kd * chunk));
  std::unique_ptr<float[]> yc = alloc_f32(O * std::min(chunk, P));

  for (int64_t n = 0; n < N; ++n) {
    const T* xn = image(n);
    auto* dst = static_cast<uint8_t*>(out.data_ptr()) + n * O * P * oes;
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int64_t cols = std::min(chunk, P - p0);
      if (direct_1x1) {
        conv_gemm(kBf16, O, cols, C, w, xn + p0, P, yc.get());
      } else {
        const int64_t oy0 = p0 / Wo, nr = cols / Wo;
        parallel_for(Kd, 1, [&](int64_t k0, int64_t k1) {
          im2col_rows(xn, H, W, KH, KW, s, pl, pt, Wo, oy0, nr, k0, k1, col.data());
        });
        conv_gemm(kBf16, O, cols, Kd, w, col.data(), cols, yc.get());
      }
      parallel_for(O, std::max<int64_t>(1, 16384 / cols), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          bias_and_store(yc.get() + o * cols, cols, bf ? bf->data() + o : nullptr, dst + (o * P + p0) * oes, ot);
      });
    }
  }
}

// A bf16 stride-1 conv as an implicit GEMM: image n is copied once into a zero-padded [C, Hp, Wp]
// buffer, and row (ch, ky, kx) of B is that buffer from ch * Hp * Wp + ky * Wp + kx on: column
// oy * Wp + ox of the product is output pixel (oy, ox) for ox < Wo (the Wp - Wo columns past each row
// are computed and dropped). No im2col (which writes every input element KH * KW times).
void conv2d_bf16_implicit(const OpCall& c, Tensor& out, const std::function<const uint16_t*(int64_t)>& image,
                          const uint16_t* w) {
  const Tensor &x = c.inputs[0], &wt = c.inputs[1];
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = wt.size(0), KH = wt.size(2), KW = wt.size(3);
  const int64_t pl = c.attrs.ints[1], pr = c.attrs.ints[2], pt = c.attrs.ints[3], pb = c.attrs.ints[4];
  const int64_t Ho = out.size(2), Wo = out.size(3), P = Ho * Wo, Kd = C * KH * KW;
  const int64_t Hp = H + pt + pb, Wp = W + pl + pr, plane = Hp * Wp;
  std::unique_ptr<F32Input> bf = bias.defined() ? std::make_unique<F32Input>(bias) : nullptr;
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  // The last row of the last channel reads up to KW - 1 elements past the plane: slack of a row.
  std::vector<uint16_t> xpad(size_t(C * plane + Wp + KW), 0);
  std::vector<const uint16_t*> rows(static_cast<size_t>(Kd));
  for (int64_t kk = 0; kk < Kd; ++kk) {
    const int64_t ch = kk / (KH * KW), ky = (kk / KW) % KH, kx = kk % KW;
    rows[size_t(kk)] = xpad.data() + ch * plane + ky * Wp + kx;
  }
  // Output rows per GEMM: the f32 chunk [O, rows * Wp] within kColBytes.
  const int64_t chunk_rows = std::max<int64_t>(1, std::min<int64_t>(Ho, kColBytes / std::max<int64_t>(O * Wp * 4, 1)));
  std::unique_ptr<float[]> yc = alloc_f32(O * chunk_rows * Wp);
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* xn = image(n);
    parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch)
        for (int64_t y = 0; y < H; ++y)
          std::memcpy(xpad.data() + ch * plane + (y + pt) * Wp + pl, xn + (ch * H + y) * W, size_t(W) * 2);
    });
    auto* dst = static_cast<uint8_t*>(out.data_ptr()) + n * O * P * oes;
    for (int64_t oy0 = 0; oy0 < Ho; oy0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, Ho - oy0), cols = nr * Wp;
      gemm_bf16_rows(false, O, cols, Kd, 1.f, w, Kd, rows.data(), oy0 * Wp, 0.f, yc.get(), cols);
      parallel_for(O, std::max<int64_t>(1, 16384 / cols), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          for (int64_t r = 0; r < nr; ++r)
            bias_and_store(yc.get() + o * cols + r * Wp, Wo, bf ? bf->data() + o : nullptr,
                           dst + (o * P + (oy0 + r) * Wo) * oes, ot);
      });
    }
  }
}

// Whether oneDNN's convolution is the default (ConvKernel::best) for `e` on this CPU: bf16 where oneDNN
// runs it on AMX tiles (issue 36; PyTorch's convolutions run there too), otherwise as measured on
// AVX512-BF16 (docs/benchmarks.md "VAE convolutions on oneDNN").
bool onednn_conv_by_default(ConvElem e) {
  if (e == ConvElem::bf16) return onednn_bf16_uses_amx() || kOnednnConvBf16WithoutAmx;
  return kOnednnConvF32;
}

// Whether every image x[n] is one contiguous [C, H, W] block (any stride between images: e.g. the
// overlapping frame windows of a causal 3D conv), so that image n can be read in place.
bool images_contiguous(const Tensor& x) {
  const auto& st = x.strides();
  return x.dim() == 4 && (x.size(3) <= 1 || st[3] == 1) && (x.size(2) <= 1 || st[2] == x.size(3)) &&
         (x.size(1) <= 1 || st[1] == x.size(2) * x.size(3));
}

// The conv on oneDNN's primitive (x and w of one dtype, f32 or bf16); false where oneDNN has no native
// convolution for it (the caller then runs the GEMM path). Channels-last images are read and written as
// they are.
bool conv2d_onednn(const OpCall& c, Tensor& out, bool bf16, const Tensor& residual) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  if (out.numel() == 0) return false;
  const bool last = is_channels_last(c);
  const bool per_image = !last && images_contiguous(x);
  const Tensor xc = per_image || x.is_contiguous() ? x : x.contiguous();
  const Tensor wc = w.is_contiguous() ? w : w.contiguous();
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  std::unique_ptr<F32Input> bf = bias.defined() ? std::make_unique<F32Input>(bias) : nullptr;
  const auto& a = c.attrs.ints;
  const int64_t C = last ? x.size(3) : x.size(1), H = last ? x.size(1) : x.size(2), W = last ? x.size(2) : x.size(3);
  const int64_t Ho = last ? out.size(1) : out.size(2), Wo = last ? out.size(2) : out.size(3);
  OnednnConvShape s{x.size(0), C, H, W, x.size(0) > 1 && !last ? xc.strides()[0] : C * H * W,
                    w.size(0), w.size(2), w.size(3), a[0], a[1], a[2], a[3], a[4], Ho, Wo};
  s.nhwc = last;
  const ConvElem e = bf16 ? ConvElem::bf16 : ConvElem::f32;
  const void* xp = bf16 ? static_cast<const void*>(xc.data<uint16_t>()) : xc.data<float>();
  const void* wp = bf16 ? static_cast<const void*>(wc.data<uint16_t>()) : wc.data<float>();
  return onednn_conv2d(e, e, s, xp, wp, bf ? bf->data() : nullptr, out.data_ptr(),
                       residual.defined() ? residual.data_ptr() : nullptr);
}

// The conv into out by the implicit GEMM (bf16 where the bf16 GEMM is native) or the f32 tiles.
void conv2d_gemm(const OpCall& c, Tensor& out) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const bool per_image = images_contiguous(x);
  const int64_t image_stride = per_image ? x.strides()[0] : x.numel() / std::max<int64_t>(x.size(0), 1);
  // bf16 stays bf16 only where the bf16 GEMM is native (elsewhere it widens to f32 anyway, and the f32
  // path below measured faster than the widening kernel there).
  if (x.dtype() == DType::bf16 && w.dtype() == DType::bf16 && gemm_bf16_native(w.size(0), 1024, current_tuning())) {
    const Tensor xc = per_image ? x : x.contiguous();
    const Tensor wc = w.is_contiguous() ? w : w.contiguous();
    const std::function<const uint16_t*(int64_t)> image = [&](int64_t n) {
      return xc.data<uint16_t>() + n * image_stride;
    };
    const bool one_by_one = w.size(2) == 1 && w.size(3) == 1;
    if (c.attrs.ints[0] == 1 && !one_by_one)
      conv2d_bf16_implicit(c, out, image, wc.data<uint16_t>());
    else
      conv2d_typed<uint16_t>(c, out, image, wc.data<uint16_t>());
    return;
  }
  const F32Input wf(w);
  const bool x_direct = x.dtype() == DType::f32 && per_image;
  const int64_t image_elems = x.numel() / std::max<int64_t>(x.size(0), 1);
  std::unique_ptr<float[]> xbuf = x_direct ? nullptr : alloc_f32(image_elems);
  conv2d_typed<float>(c, out, [&](int64_t n) -> const float* {
    if (x_direct) return x.data<float>() + n * image_stride;
    gather_f32(x.select(0, n), xbuf.get());
    return xbuf.get();
  }, wf.data());
}

// out = residual + out (conv2d_add after a conv that did not add it), rounded once to out's dtype.
void add_residual(const Tensor& residual, Tensor& out) {
  const int64_t n = out.numel(), es = int64_t(dtype_size(out.dtype()));
  auto* y = static_cast<uint8_t*>(out.data_ptr());
  const auto* r = static_cast<const uint8_t*>(residual.data_ptr());
  parallel_for((n + kMapChunk - 1) / kMapChunk, 1, [&](int64_t b0, int64_t b1) {
    const int64_t i = b0 * kMapChunk, len = std::min(b1 * kMapChunk, n) - i;
    add_row_into(out.dtype(), r + i * es, y + i * es, len);
  });
}

void conv2d_kernel(const OpCall& c, Tensor& out) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  // conv2d_add's residual: added by the oneDNN path band by band, else after the whole conv.
  const Tensor residual = c.inputs.size() > 3 && c.inputs[3].defined() ? c.inputs[3].contiguous() : Tensor();
  if (x.dtype() == w.dtype() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16) &&
      conv_uses_onednn(x.dtype() == DType::bf16, current_tuning()) &&
      conv2d_onednn(c, out, x.dtype() == DType::bf16, residual))
    return;
  // The GEMM paths read channels-first images: channels-last ones by way of copies.
  if (is_channels_last(c)) return run_channels_first(c, out, conv2d_kernel);
  conv2d_gemm(c, out);
  if (residual.defined()) add_residual(residual, out);
}

}  // namespace

bool conv_uses_onednn(bool bf16, const Tuning& t) {
  const ConvElem e = bf16 ? ConvElem::bf16 : ConvElem::f32;
  switch (t.conv_kernel) {
    case ConvKernel::implicit_gemm: return false;
    case ConvKernel::onednn: return onednn_conv_available(e);
    case ConvKernel::best: return onednn_conv_available(e) && onednn_conv_by_default(e);
  }
  return false;
}

bool prefers_channels_last(DType dtype) {
  const Tuning& t = current_tuning();
  if (t.image_layout != ImageLayoutChoice::best) return t.image_layout == ImageLayoutChoice::channels_last;
  return (dtype == DType::f32 || dtype == DType::bf16) && conv_uses_onednn(dtype == DType::bf16, t) &&
         onednn_conv_runs_channels_last(dtype == DType::bf16 ? ConvElem::bf16 : ConvElem::f32);
}

std::string conv_kernel_name(bool bf16) {
  const ConvElem e = bf16 ? ConvElem::bf16 : ConvElem::f32;
  if (conv_uses_onednn(bf16, current_tuning())) return "oneDNN convolution (" + onednn_conv_impl(e) + ")";
  std::string why = current_tuning().conv_kernel == ConvKernel::implicit_gemm ? "DIFFQ_CONV_KERNEL=implicit-gemm"
                    : onednn_conv_available(e) ? "measured faster here than oneDNN's " + onednn_conv_impl(e)
                                               : "oneDNN: " + onednn_conv_impl(e);
  const std::string gemm = bf16 && gemm_bf16_native(1024, 1024, current_tuning())
                               ? "bf16 implicit GEMM (stride 1) / im2col chunks -> the bf16 GEMM"
                               : "im2col chunks -> the f32 GEMM";
  return gemm + " (" + why + ")";
}

void register_conv_kernels() { ops::register_kernel(OpKind::conv2d, DeviceKind::cpu, conv2d_kernel); }

}  // namespace diffq::backend::cpu
