// Loading a module's parameters by name from a state dict (tensors usually borrowed from an mmap).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "modules/module.h"

namespace diffq {

using StateDict = std::map<std::string, Tensor>;

struct LoadOptions {
  // Compute dtype for floating parameters (e.g. bf16 file, f32 compute); nullopt keeps the file's.
  std::optional<DType> dtype;
  // Modules whose parameters keep float32 (Diffusers' _keep_in_fp32_modules): a parameter is kept
  // when "<entry>." occurs in its dotted name or the name starts with it.
  std::vector<std::string> keep_in_fp32;
  bool strict = true;  // missing or unexpected keys are an error listing them
  std::string source;  // for messages: the file or folder the state dict came from
};

struct LoadReport {
  std::vector<std::string> missing;     // module parameters absent from the state dict
  std::vector<std::string> unexpected;  // state-dict keys no parameter consumed
  int64_t zero_copy = 0;                // parameters that kept borrowing the source bytes
  int64_t converted = 0;                // parameters copied for a dtype conversion
};

// Binds every parameter of `m` to the tensor of the same name. A parameter whose dtype already equals
// the target keeps the source bytes (no copy; each parameter gets its own Storage object borrowing
// them, so residency moves stay per-parameter). Shape mismatches are always an error.
LoadReport load_state_dict(Module& m, const StateDict& sd, const LoadOptions& opt = {});

// True when `name` lies in one of the modules listed (Diffusers' module-name match).
bool module_name_matches(const std::string& name, const std::vector<std::string>& modules);

}  // namespace diffq
