// The unfused LoRA forward beside a Linear (dense or quantized), as PEFT's LoraLayer computes it:
//   y = base(x) + sum over active adapters i (in set_adapters order) of ((x @ A_i^T) @ B_i^T + b_i) * (w_i * alpha_i / r_i)
// (b_i: PEFT's lora_bias, usually absent)
// in the compute dtype (A, B cast to x's dtype and device once, then cached). fuse() merges the active adapters
// into a dense weight (W + sum_i (B_i @ A_i) * s_i, float32, cast to W's dtype) and keeps the original tensor
// (the checkpoint's mmap view), so unfuse() restores it bit for bit; quantized weights are never fused.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "modules/layers.h"

namespace diffq::lora {

class LoraLinear : public LinearAdapter {
 public:
  struct Slot {
    std::string adapter;
    Tensor A, B;           // [r, in], [out, r] float32 host (as loaded)
    Tensor bias;           // [out] float32 (PEFT lora_bias: lora_B's bias, scaled with the rest), or undefined
    double scaling = 1.0;  // alpha / r (or alpha / sqrt(r) with rsLoRA)
    double weight = 1.0;   // set_adapters' weight
    bool active = true;
    Tensor A_run, B_run, bias_run;  // A, B, bias in the last compute dtype/device
  };
  Tensor apply(const Tensor& x, const Tensor& y) override;
  std::string replay_key() const override;

  Slot* find(const std::string& adapter);
  std::vector<Slot> slots;
  bool merged = false;     // fused: the base weight carries the adapters, apply() adds nothing
  Tensor original_weight;  // the weight before fuse()
  Tensor original_bias;    // the bias before fuse() (when an adapter has a lora bias)
  Residency original_bias_residency = Residency::unloaded;
  Residency original_residency = Residency::unloaded;
};

// Merges the active slots (times `scale`) into lin's dense weight; false (nothing done) for a quantized weight.
bool fuse(Linear& lin, LoraLinear& l, double scale);
void unfuse(Linear& lin, LoraLinear& l);

}  // namespace diffq::lora
