// Runtime choices of the CPU kernels that change their speed, not what they compute: how sgemm splits
// C over the thread pool and the attention tile sizes. The defaults are the measured best on the
// reference machine (docs/benchmarks.md); the autotuner (compile's max-autotune) times candidates on
// the real shapes and installs its pick around a kernel call with ScopedTuning. The current choice is
// per calling thread: a kernel reads it once when called, before it fans out over the pool.
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// How sgemm splits C[m, n] into one part per pool thread (parts start at multiples of 16).
enum class GemmSplit : uint8_t {
  longer_side,  // split n when n >= m, else m
  rows,         // split m
  cols,         // split n
  none,         // one kernel call on the calling thread
};

// Which kernel computes each part of sgemm / gemm_bf16 (gemm.h). Not autotuned: `best` is a fixed
// function of the shape and thread count (gemm.cpp), so results stay deterministic. The default can be
// overridden with DIFFQ_GEMM_KERNEL=best|diffq|diffq-widen|openblas|onednn (for benchmarks
// and tests; onednn is an error on a CPU without bf16 matrix instructions).
enum class GemmKernel : uint8_t {
  best,      // the one measured faster for the shape (docs/benchmarks.md "CPU GEMM (issue 2)")
  diffq,     // diffq's own blocked kernels: bf16 on the bf16 dot product where the CPU has it
             // (bf16_dot_gemm.h), else widened to f32 (sgemm_kernel.h)
  diffq_widen,  // diffq's blocked kernel with bf16 widened to f32 FMAs even where the CPU has a bf16 dot
  openblas,  // OpenBLAS cblas_sgemm (bf16: widened to f32 block by block first)
  onednn,    // bf16 and int8: oneDNN's matmul (AVX512-BF16 / AVX512-VNNI / AMX; onednn_gemm.h); f32 as `best`
};

// Which kernel computes conv2d on the CPU (conv.cpp). `best` is a fixed function of the dtype and the
// CPU (docs/benchmarks.md "VAE convolutions on oneDNN"); DIFFQ_CONV_KERNEL=best|onednn|implicit-gemm
// overrides it (onednn is an error where oneDNN has no native convolution for f32 nor bf16 here).
enum class ConvKernel : uint8_t {
  best,           // oneDNN's convolution where it measured faster for the dtype on this CPU class
  onednn,         // oneDNN's convolution primitive wherever it has a native one (onednn_conv.h)
  implicit_gemm,  // diffq's GEMMs: im2col chunks, or the implicit GEMM for stride-1 bf16 (conv.cpp)
};

// Which tiles compute sdpa on the CPU (attention.cpp). `best` is a fixed function of the inputs' dtype
// and the CPU (docs/benchmarks.md "Attention on oneDNN tiles", "Ninth AMX session"): bf16 inputs on the
// AMX tiles where oneDNN's bf16 matmul runs on AMX (so DNNL_MAX_CPU_ISA below AMX turns them off too; the
// oneDNN tiles there if the process may not use AMX itself), else on the vdpbf16ps tiles where the CPU has
// AVX512-BF16 (and DIFFQ_GEMM_KERNEL is not diffq-widen), else the f32 tiles; non-bf16 inputs always on the
// f32 tiles. DIFFQ_ATTENTION_KERNEL=best|amx|onednn|bf16-dot|f32 overrides it (amx, onednn and bf16-dot
// are errors on a CPU without them).
enum class AttentionKernel : uint8_t {
  best,
  onednn,    // bf16: Q K^T and P V blocks on oneDNN's bf16 matmul (attention_onednn.h)
  amx,       // bf16: both block products on AMX tiles written for attention (attention_amx.h)
  bf16_dot,  // bf16: diffq's vdpbf16ps tiles (attention_bf16_dot.h)
  f32,       // every dtype widened to f32 (attention.cpp's Highway tiles)
};

// Whether dense bf16 linear weights are packed once, at their first bf16 linear, into the blocked layout
// oneDNN's bf16 GEMM reads (packed_linear_weight.h) instead of oneDNN copying them into it on every call.
// `best`: where oneDNN is the bf16 GEMM (AMX; AMD with AVX512-BF16: docs/benchmarks.md "Linear weights
// packed once"); `on`: wherever oneDNN can read packed bf16 weights natively, even where another kernel
// is the bf16 GEMM (Intel AVX512-BF16 without AMX: diffq's pair kernel); `off`: never (nor the K and V
// blocks the oneDNN attention tiles pack per head: attention_onednn.h).
// DIFFQ_PACK_WEIGHTS=best|on|off overrides the default (best).
enum class WeightPacking : uint8_t { best, on, off };

// Which layout the models whose convolutions dominate (the VAEs) keep their images in on the CPU
// (ops::prefers_channels_last). `best`: channels-last where oneDNN's convolution runs the dtype (it computes
// channels-last natively; channels-first costs a transpose each way around every conv: docs/benchmarks.md
// "Fifth AMX session"), else channels-first. DIFFQ_IMAGE_LAYOUT=best|channels-first|channels-last
// overrides it. Both layouts compute the same values up to the group norm's summation order.
enum class ImageLayoutChoice : uint8_t { best, channels_first, channels_last };

inline constexpr int64_t kOnednnAttentionBq = 192, kOnednnAttentionBk = 512;

struct Tuning {
  GemmSplit gemm_split = GemmSplit::longer_side;
  GemmKernel gemm_kernel = GemmKernel::best;
  ConvKernel conv_kernel = ConvKernel::best;
  AttentionKernel attention_kernel = AttentionKernel::best;
  WeightPacking weight_packing = WeightPacking::best;
  ImageLayoutChoice image_layout = ImageLayoutChoice::best;
  int gemm_parts_per_thread = 1;  // parts = threads * this (more, smaller parts balance uneven cores)
  // attention: query rows per tile (rounded up to a multiple of 6) and keys per block of the online
  // softmax (rounded up to 2 vectors); the process defaults are kOnednnAttentionBq x Bk where the oneDNN
  // tiles run (current_tuning()).
  int64_t attn_bq = 48;
  int64_t attn_bk = 256;

  bool operator==(const Tuning&) const = default;
};

// The calling thread's current tuning (the defaults, with DIFFQ_GEMM_KERNEL, DIFFQ_CONV_KERNEL,
// DIFFQ_ATTENTION_KERNEL, DIFFQ_PACK_WEIGHTS and DIFFQ_IMAGE_LAYOUT, unless a ScopedTuning is alive on it).
const Tuning& current_tuning();

// Installs `t` on the calling thread for its lifetime; nests.
class ScopedTuning {
 public:
  explicit ScopedTuning(const Tuning& t);
  ~ScopedTuning();
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;

 private:
  const Tuning* prev_;
  Tuning mine_;
};

}  // namespace diffq::backend::cpu
