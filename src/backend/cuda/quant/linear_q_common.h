// What every dequantizing linear_q kernel on CUDA shares (linear_q_*.cpp): the call's weight as its
// scheme's class, checked, and "dequantize W into a buffer, then the dense cuBLASLt linear". The buffer
// lives for the one call: the caching allocator hands the same block to the next layer of that size, so it
// is a tile buffer reused across layers, not a second copy of the model.
#pragma once

#include <functional>
#include <initializer_list>

#include "backend/cuda/kernels.h"
#include "diffq/error.h"
#include "ops/linear_q.h"

namespace diffq::backend::cuda {

// The weight of a call as its scheme's class W, checked: a scheme name registered for another class, or a
// variant of the same class `reject` says this kernel does not compute, is refused rather than misread.
template <class W, class Reject>
const W& linear_q_weight(const OpCall& c, const char* scheme, Reject&& reject) {
  const auto* w = dynamic_cast<const W*>(c.attrs.packed);
  check(w != nullptr && !reject(*w), "linear_q", "cuda: the ", scheme, " kernel was given a ", c.attrs.packed->scheme(),
        " weight");
  return *w;
}

// y = x @ W^T + bias where W [N, K] is written by `fill(wd)` into a buffer of x's dtype on x's device; the
// packed tensors must live there too (checked, naming the scheme).
Tensor dequantize_then_linear(const OpCall& c, const char* scheme, std::initializer_list<const Tensor*> packed,
                              const Tensor& x, const Tensor& bias, const std::function<void(Tensor& wd)>& fill);

// The same with the call's own x and bias.
Tensor dequantize_then_linear(const OpCall& c, const char* scheme, std::initializer_list<const Tensor*> packed,
                              const std::function<void(Tensor& wd)>& fill);

void register_linear_q_torchao_kernels();  // linear_q_torchao.cpp
void register_linear_q_gguf_kernels();     // linear_q_gguf.cpp
void register_linear_q_bnb_kernels();      // linear_q_bnb.cpp
void register_linear_q_quanto_kernels();   // linear_q_quanto.cpp
void register_linear_q_sdnq_kernels();     // linear_q_sdnq.cpp
void register_linear_q_autoround_kernels();  // linear_q_autoround.cpp
void register_linear_q_scaled_kernels();   // linear_q_scaled.cpp
void register_linear_q_nunchaku_kernels();  // linear_q_nunchaku.cpp

}  // namespace diffq::backend::cuda
