// conv2d forward on oneDNN's convolution primitive (jit / brgemm convolutions on AVX-512, AVX512-BF16 and
// AMX), as PyTorch's CPU convolution runs: src and dst in oneDNN's preferred layouts (channels-last on
// AVX-512 and AMX), converted from / to diffq's NCHW around the primitive, or read and written in place
// for channels-last images; weights reordered once per weight tensor and cached. conv.cpp decides when this runs instead of the implicit GEMM (tuning.h ConvKernel).
//
// Threads: one conv is one oneDNN call on the calling thread, which lets oneDNN's OpenMP team use
// diffq's thread count for it (diffq's pool threads sleep on their condition variable meanwhile); inside
// a diffq parallel region it runs single-threaded. Primitives are created once per shape and cached.
#pragma once

#include <cstdint>
#include <string>

namespace diffq::backend::cpu {

// The element types a oneDNN convolution runs here: src and weights of one type, dst f32 or bf16.
enum class ConvElem : uint8_t { f32, bf16 };

// One conv2d: images x[n] of [c, h, w] (contiguous within an image; image_stride elements apart, which
// may be less than c * h * w: a causal 3D conv's overlapping frame windows), weights [o, c, kh, kw]
// contiguous, bias [o] f32 or null, dst [n, o, ho, wo] contiguous. nhwc: x's images are [h, w, c]
// (image_stride = h * w * c) and dst is [n, ho, wo, o], both as the primitive reads and writes them.
struct OnednnConvShape {
  int64_t n, c, h, w, image_stride;
  int64_t o, kh, kw;
  int64_t stride, pad_l, pad_r, pad_t, pad_b;
  int64_t ho, wo;
  bool nhwc = false;
};

// Whether oneDNN has a native (non-reference) convolution for `in` on this CPU: f32 with AVX-512, bf16
// with AVX512-BF16 or usable AMX-BF16.
bool onednn_conv_available(ConvElem in);

// oneDNN's implementation name for a representative VAE conv (3x3, 128 -> 128 channels, 64x64) of
// `in` ("brg_conv_fwd:avx512_core_amx", "jit:avx512_core_bf16", ...), or why none ("unavailable: ...").
std::string onednn_conv_impl(ConvElem in);

// Whether oneDNN's convolution of `in` reads and writes channels-last images here (the representative
// conv's src and dst layouts are NHWC: AVX-512 and AMX), so channels-last images need no conversion.
bool onednn_conv_runs_channels_last(ConvElem in);

// Runs the conv; false (computing nothing) where oneDNN has only a reference implementation for it.
// residual (null, or dst's shape and element type, contiguous): y = residual + conv, the conv rounded to
// `out` first (conv2d_add), added band by band while the band is in cache.
bool onednn_conv2d(ConvElem in, ConvElem out, const OnednnConvShape& s, const void* x, const void* w,
                   const float* bias, void* y, const void* residual = nullptr);

// For tests: convolutions run so far, and the weight cache: reordered weights held, their bytes, and how
// many times a cached weight was found changed (same address and shape, other contents) and reordered
// again.
struct OnednnConvStats {
  int64_t calls = 0, entries = 0, bytes = 0, refreshed = 0;
};
OnednnConvStats onednn_conv_stats();

}  // namespace diffq::backend::cpu
