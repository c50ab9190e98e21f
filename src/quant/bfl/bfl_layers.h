// BFL's fp8r / nvfp4 single files (Diffusers' BFLQuantizationConfig): which Linear layers of a state dict are
// quantized, detected from the tensors as Diffusers' BFLQuantizer.maybe_update_state_dict does. A layer
// `<p>` is quantized when `<p>.weight_scale` exists; it is nvfp4 when `<p>.weight_scale_2` exists too
// (then `<p>.input_scale` must exist), else fp8r. Layers of both kinds may share a file, as in Diffusers.
//
// Errors (each names the file and the key), where Diffusers raises or would load wrong numbers:
//   - `<p>.weight_scale` without `<p>.weight`, or a weight of the other layout's dtype (fp8r: float8_e4m3fn,
//     nvfp4: uint8);
//   - nvfp4 without `<p>.input_scale`; `<p>.weight_scale_2` / `<p>.input_scale` without `<p>.weight_scale`;
//   - a float8 or uint8 `.weight` with no `.weight_scale` in a file that has quantized layers (a mixed
//     file: Diffusers would cast those codes to float without their scale).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "modules/state_dict.h"
#include "quant/bfl/scaled_weight.h"

namespace diffq::quant {

struct BflQuantizedLayers {
  std::map<std::string, std::shared_ptr<ScaledWeight>> weights;  // "<p>" (the key without ".weight") -> weight
  std::set<std::string> consumed;  // every key read: <p>.weight, .weight_scale, .weight_scale_2, .input_scale
  int fp8r = 0, nvfp4 = 0;
};

// True when some key ends in ".weight_scale" (a BFL fp8r / nvfp4 file).
bool has_bfl_quantized_layers(const StateDict& sd);
// The quantized layers of `sd` (keys as in the file); `file` names it in errors.
BflQuantizedLayers read_bfl_quantized_layers(const StateDict& sd, const std::string& file);

}  // namespace diffq::quant
