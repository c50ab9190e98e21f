// One scaled-dot-product attention call as the CPU kernel's per-target tile code sees it
// (attention.cpp): the inputs, their sizes, the tiling and where the output goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/tuning.h"

#include "diffq/tensor.h"

namespace diffq::backend::cpu {

// A [B, H, S, cols] input (or a mask broadcast to [B, H, Sq, Sk]) as raw memory: element (b, h, r, c)
// is at base + (b st[0] + h st[1] + r st[2] + c st[3]) * element size. Tensor accessors are not called
// per row by the tiles (they are not free).
struct AttentionOperand {
  const uint8_t* base = nullptr;  // element 0 (the view's offset applied); null: absent (no mask)
  DType dtype = DType::f32;
  int64_t esize = 4;
  int64_t st[4] = {0, 0, 0, 0};

  const uint8_t* at(int64_t b, int64_t h, int64_t r, int64_t c) const {
    return base + (b * st[0] + h * st[1] + r * st[2] + c * st[3]) * esize;
  }
};

// Query rows of the micro-kernels: the tiles' query blocks are a multiple of this.
inline constexpr int64_t kAttentionRows = 6;

struct AttentionProblem {
  AttentionOperand q;     // [B, H, Sq, D], any float dtype and strides
  AttentionOperand k;     // [B, H, Sk, D]
  AttentionOperand v;     // [B, H, Sk, Dv]
  AttentionOperand mask;  // absent, or strides broadcast to [B, H, Sq, Sk]
  bool bool_mask = false; // true: attend where mask != 0; else mask is added to the scores
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
  float scale_log2e = 0;  // softmax scale x log2(e): the kernel works with powers of two
  int64_t bq = kAttentionRows;  // query rows per tile (a multiple of kAttentionRows)
  int64_t bk = 1;         // keys per block of the online softmax
  int64_t q_blocks = 0;   // ceil(Sq / bq); tile t is (b, h) = t / q_blocks, query block t % q_blocks
  bool pack_kv = true;    // the oneDNN tiles may pack K and V per head (not under WeightPacking::off)
  uint8_t* dst = nullptr;  // contiguous [B, H, Sq, Dv] output
  DType out_dtype = DType::f32;
};

// Row (b, h, i) of p's mask over keys [j0, j0 + n) as an additive f32 row (scores + row): a pointer into
// the mask where it is f32 with unit key stride, else converted into tmp (bool masks: 0 where attended,
// -inf elsewhere); null where there is no mask or i is a padding row (i >= Sq). Shared by the f32 and
// bf16 tiles.
const float* attention_mask_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                                float* tmp);

// Output row pos (of [B * H * Sq]) = orow / l (l = 0: every key masked, 0 as torch), rounded to p's
// output dtype; orow is scaled in place.
void attention_store_row(const AttentionProblem& p, int64_t pos, float* orow, float l);

// A per-thread growable aligned float buffer (kept between calls: no allocation per tile or call).
using AlignedScratch = AlignedBuffer<float>;

// Whether bf16 inputs run on matrix-engine tiles by default (AttentionKernel::best): where the oneDNN tiles
// can run and oneDNN's bf16 matmul is on AMX tiles (docs/benchmarks.md "Attention on oneDNN tiles": on
// AVX512-BF16 alone the vdpbf16ps tiles are faster); best then takes the AMX tiles (attention_amx.h) where
// this process may use AMX, else the oneDNN tiles.
bool attention_onednn_by_default();

// The tiles that run p under t (onednn, bf16_dot or f32; never best): t.attention_kernel where it
// applies to p's dtypes, else as AttentionKernel::best decides.
AttentionKernel attention_kernel_for(const AttentionProblem& p, const Tuning& t);

// What runs bf16 attention under t, in words (`diffq info`).
std::string attention_kernel_name(const Tuning& t);

// The kernel's base-2 exponential, vectorised as in the attention tiles, for x <= 0 (tests).
void attention_exp2_for_test(const float* x, float* y, int64_t n);

}  // namespace diffq::backend::cpu
