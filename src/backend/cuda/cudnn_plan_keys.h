// The keys of the cuDNN plan caches (plan_cache.h): every field a built cuDNN graph depends on, so that
// two calls share a plan exactly when cuDNN would build the same one. Plain C++ (no CUDA header), with
// the stride normalisation the sdpa path applies before keying, so tests/cuda/test_cudnn_plan_cache.cpp
// checks both on any machine.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <functional>

#include "backend/cuda/plan_cache.h"
#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// How sdpa's mask reaches cuDNN. The cuDNN path takes unmasked calls only today (a masked call runs the
// simple kernel: cuDNN's softmax of a row whose keys are all masked is not torch's zero row); the
// field keeps masked plans apart once they are added.
enum class SdpaMaskKind : uint8_t { none, additive, boolean };

using Strides4 = std::array<int64_t, 4>;

struct SdpaPlanKey {
  int device = 0;
  DType dtype = DType::bf16;  // q, k, v and the output
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
  Strides4 q{}, k{}, v{}, o{};  // element strides of [B, H, S, D] views (normalised: see sdpa_key_strides)
  float scale = 0.0f;           // compared bit for bit
  SdpaMaskKind mask = SdpaMaskKind::none;

  bool operator==(const SdpaPlanKey& o2) const {
    return device == o2.device && dtype == o2.dtype && B == o2.B && H == o2.H && Sq == o2.Sq && Sk == o2.Sk &&
           D == o2.D && Dv == o2.Dv && q == o2.q && k == o2.k && v == o2.v && o == o2.o &&
           std::bit_cast<uint32_t>(scale) == std::bit_cast<uint32_t>(o2.scale) && mask == o2.mask;
  }
};

struct SdpaPlanKeyHash {
  size_t operator()(const SdpaPlanKey& k) const {
    size_t s = 0;
    for (int64_t v : {int64_t(k.device), int64_t(k.dtype), k.B, k.H, k.Sq, k.Sk, k.D, k.Dv,
                      int64_t(std::bit_cast<uint32_t>(k.scale)), int64_t(k.mask)})
      hash_combine(s, uint64_t(v));
    for (const Strides4* st : {&k.q, &k.k, &k.v, &k.o})
      for (int64_t v : *st) hash_combine(s, uint64_t(v));
    return s;
  }
};

// How a conv2d reaches cuDNN: its padding given to cuDNN as pre/post paddings, or the input padded
// by a copy first (the fallback where no engine takes the asymmetric padding).
enum class ConvPadMode : uint8_t { cudnn, copy };

struct ConvPlanKey {
  int device = 0;
  DType dtype = DType::f32;  // x, w, bias and the output (mixed calls are computed in float32)
  int64_t N = 0, C = 0, H = 0, W = 0;  // the input as given to cuDNN (after any padding copy)
  int64_t O = 0, KH = 0, KW = 0;
  int64_t stride = 1;
  std::array<int64_t, 4> pad{};  // cuDNN's {top, left} pre and {bottom, right} post paddings
  bool bias = false;
  ConvPadMode pad_mode = ConvPadMode::cudnn;

  bool operator==(const ConvPlanKey& o) const = default;
};

struct ConvPlanKeyHash {
  size_t operator()(const ConvPlanKey& k) const {
    size_t s = 0;
    for (int64_t v : {int64_t(k.device), int64_t(k.dtype), k.N, k.C, k.H, k.W, k.O, k.KH, k.KW, k.stride,
                      k.pad[0], k.pad[1], k.pad[2], k.pad[3], int64_t(k.bias), int64_t(k.pad_mode)})
      hash_combine(s, uint64_t(v));
    return s;
  }
};

// The strides cuDNN is given for a [B, H, S, D] view: a dim of size 1 is never stepped along, so its
// stride is free; it is set to the view's whole span (the largest size * stride of the other dims), so
// that views differing only there share a plan and cuDNN never sees an overlapping layout.
inline Strides4 sdpa_key_strides(const std::array<int64_t, 4>& sizes, const Strides4& strides) {
  int64_t span = 1;
  for (int i = 0; i < 4; ++i)
    if (sizes[size_t(i)] > 1 && sizes[size_t(i)] * strides[size_t(i)] > span) span = sizes[size_t(i)] * strides[size_t(i)];
  Strides4 r = strides;
  for (int i = 0; i < 4; ++i)
    if (sizes[size_t(i)] <= 1) r[size_t(i)] = span;
  return r;
}

// Whether cuDNN's flash attention can read a view with these (normalised) strides in place: the head
// dim contiguous, every other stride a multiple of 8 elements (16 bytes of bf16/fp16: the kernels load
// rows with 16-byte vector and TMA accesses) and no broadcast (stride 0) dim. Else it gets a copy.
inline bool sdpa_strides_usable(const std::array<int64_t, 4>& sizes, const Strides4& st) {
  if (sizes[3] > 1 && st[3] != 1) return false;
  for (int i = 0; i < 3; ++i)
    if (st[size_t(i)] <= 0 || st[size_t(i)] % 8 != 0) return false;
  return true;
}

}  // namespace diffq::backend::cuda
