// Loading a module's parameters by name from a state dict (tensors usually borrowed from an mmap).
#pragma once

#include <functional>
#include <memory>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "modules/module.h"

namespace diffq {

using StateDict = std::map<std::string, Tensor>;

// A parameter as the loading hooks see it: its module (e.g. a "Linear" named "attn.to_q"), its own
// name there ("weight") and its full dotted name ("attn.to_q.weight").
struct ParamRef {
  const Module& owner;
  const std::string& module;
  const std::string& local;
  const std::string& full;
  const Shape& shape;
};

struct LoadOptions {
  // Compute dtype for floating parameters (e.g. bf16 file, f32 compute); nullopt keeps the file's.
  std::optional<DType> dtype;
  // Modules whose parameters keep float32 (Diffusers' _keep_in_fp32_modules): a parameter is kept
  // when "<entry>." occurs in its dotted name or the name starts with it.
  std::vector<std::string> keep_in_fp32;
  bool strict = true;  // missing or unexpected keys are an error listing them
  std::string source;  // for messages: the file or folder the state dict came from

  // Quantization while loading, one tensor at a time. `quantize(param, value)` is called for every
  // parameter outside keep_in_fp32 with its value already in the target dtype (a transient copy when a cast was needed);
  // a non-null result is bound instead of the dense value and the source bytes of a memory-mapped
  // checkpoint are released, so the peak stays near the quantized size + the largest single weight.
  std::function<std::shared_ptr<QuantizedWeight>(const ParamRef& param, const Tensor& value)> quantize;
  // Pre-quantized checkpoints: `load_quantized(param, sd, consumed)` is asked first for every
  // parameter; a non-null result is bound and the keys it read go into `consumed` (its packed layout
  // uses other keys or shapes than the dense parameter).
  std::function<std::shared_ptr<QuantizedWeight>(const ParamRef& param, const StateDict& sd,
                                                 std::vector<std::string>& consumed)>
      load_quantized;
};

struct LoadReport {
  std::vector<std::string> missing;     // module parameters absent from the state dict
  std::vector<std::string> unexpected;  // state-dict keys no parameter consumed
  int64_t zero_copy = 0;                // parameters that kept borrowing the source bytes
  int64_t converted = 0;                // parameters copied for a dtype conversion
  int64_t quantized = 0;                // parameters bound to a QuantizedWeight (quantized or pre-quantized)
};

// Binds every parameter of `m` to the tensor of the same name. A parameter whose dtype already equals
// the target keeps the source bytes (no copy; each parameter gets its own Storage object borrowing
// them, so residency moves stay per-parameter). Shape mismatches are always an error.
LoadReport load_state_dict(Module& m, const StateDict& sd, const LoadOptions& opt = {});

// True when `name` lies in one of the modules listed (Diffusers' module-name match).
bool module_name_matches(const std::string& name, const std::vector<std::string>& modules);

}  // namespace diffq
