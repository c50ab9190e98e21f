// Wires a QuantMethod into model loading: Linear weights are quantized tensor by tensor as they are
// read (Diffusers' from_pretrained(quantization_config=...)), or read in their pre-quantized layout
// when the checkpoint was saved quantized. Only nn.Linear weights are candidates (as in every Diffusers
// backend); modules_to_not_convert and each scheme's rules come from QuantMethod::should_quantize,
// the model's keep-in-fp32 modules from `keep_in_fp32`.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "modules/state_dict.h"
#include "quant/quant_method.h"

namespace diffq {

// Sets opt.quantize (pre_quantized = false) or opt.load_quantized (pre_quantized = true, with the
// checkpoint's safetensors metadata when the format needs it).
void attach_quantization(LoadOptions& opt, std::shared_ptr<const quant::QuantMethod> method, bool pre_quantized,
                         std::shared_ptr<const io::Metadata> metadata = nullptr);

// Packed weights already built per parameter name (e.g. a GGUF file's quantized tensors), bound by name
// before the dense path and before any load_quantized hook already in the options; after loading,
// check_all_bound() fails naming a weight that matched no parameter of the model.
using QuantizedByName = std::map<std::string, std::shared_ptr<QuantizedWeight>>;
class QuantizedBinder {
 public:
  QuantizedBinder(std::shared_ptr<const QuantizedByName> weights, LoadOptions& o);
  void check_all_bound(const char* ctx, const std::string& file) const;

 private:
  std::shared_ptr<const QuantizedByName> weights_;
  std::shared_ptr<std::set<std::string>> bound_ = std::make_shared<std::set<std::string>>();
};

// A single quantized file's LoadOptions (GGUF): `opt` with its source defaulting to `file` and its dtype to
// float32 (Diffusers: torch_dtype defaults to GGUFQuantizationConfig's compute_dtype); other compute dtypes
// than float32 / bfloat16 / float16 are an error naming the file.
LoadOptions quantized_file_load_options(const LoadOptions& opt, const std::string& file, const char* ctx);

// Quantizes the dense Linear weights of an already loaded module in place (same rules as loading);
// returns how many were quantized. `keep_in_fp32` modules are skipped.
int64_t quantize_module(Module& m, const quant::QuantMethod& method, const std::vector<std::string>& keep_in_fp32 = {});

// Linear weights that are quantized in `m`, and their packed vs. dense byte counts.
struct QuantizationSummary {
  int64_t quantized = 0, dense_linear = 0;
  size_t quantized_bytes = 0, dense_bytes = 0;  // all parameters, by kind
};
QuantizationSummary summarize_quantization(const Module& m);

// Signal-to-quantization-noise ratio of every quantized Linear weight of `quantized` against the
// same-named dense weight of `reference`: 10 log10(sum w^2 / sum (w - dequantize(q))^2), in dB
// (infinity when exact). Errors name a parameter missing from `reference` or of another shape.
struct LayerSqnr {
  std::string name;    // "transformer_blocks.0.attn.to_q.weight"
  std::string scheme;  // the QuantizedWeight's scheme
  double sqnr_db = 0;
};
std::vector<LayerSqnr> weight_sqnr(const Module& quantized, const Module& reference);

}  // namespace diffq
