// Diffusers' BitsAndBytesConfig (diffusers 0.42.1 quantizers/quantization_config.py): the kwargs a
// user passes, the same validation errors, and the "quantization_config" dict Diffusers writes to
// config.json. Also the rule that decides which Linear modules stay unquantized (Diffusers'
// replace_with_bnb_linear + llm_int8_skip_modules).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diffq/dtype.h"

namespace diffq::quant {

struct BitsAndBytesConfig {
  bool load_in_8bit = false;
  bool load_in_4bit = false;
  double llm_int8_threshold = 6.0;
  std::optional<std::vector<std::string>> llm_int8_skip_modules;  // null in config.json when unset
  bool llm_int8_enable_fp32_cpu_offload = false;
  bool llm_int8_has_fp16_weight = false;
  DType bnb_4bit_compute_dtype = DType::f32;   // Diffusers' default when None
  std::string bnb_4bit_quant_type = "fp4";     // "fp4" (default) or "nf4"
  bool bnb_4bit_use_double_quant = false;
  std::string bnb_4bit_quant_storage = "uint8";  // torch dtype name the packed bytes are viewed as
  // Keys Diffusers would warn about ("Unused kwargs: [...]"); kept, never an error.
  std::vector<std::string> unused_kwargs;

  // Diffusers' constructor + post_init on keyword arguments (a JSON object). Errors (diffq::Error with
  // context "bnb.config", Diffusers' message): both load_in_4bit and load_in_8bit; a bnb_4bit_compute_dtype
  // that is not a string (or not a torch float dtype name); a bnb_4bit_quant_storage string outside
  // float16/float32/int8/uint8/float64/bfloat16; the type checks of post_init (booleans, a float
  // threshold — an integer 6 is rejected as in Python —, a list of strings for llm_int8_skip_modules,
  // a string quant type). diffq also rejects a bnb_4bit_quant_type other than "fp4"/"nf4" here (bitsandbytes
  // raises it only when the first weight is quantized). "_load_in_4bit", "_load_in_8bit" and
  // "quant_method" are accepted silently, so a config.json's quantization_config round-trips.
  static BitsAndBytesConfig from_kwargs(const nlohmann::json& kwargs);
  // The quantization_config Diffusers writes (to_dict(): every attribute, dtypes as names, with
  // "_load_in_4bit"/"_load_in_8bit" and "quant_method": "bitsandbytes").
  nlohmann::json to_json() const;

  // bitsandbytes' name of the scheme: "bnb_nf4", "bnb_fp4", "bnb_int8"; throws when neither 4 nor 8 bit.
  std::string scheme() const;
  bool is_quantizable() const { return load_in_4bit || load_in_8bit; }

  // Whether the Linear module with dotted name `module` is replaced by a bitsandbytes layer:
  // Diffusers skips it when its own (last) name is in the skip list, when a skip entry equals the dotted
  // name, or when "<entry>." occurs anywhere in the dotted name (a substring test, as Diffusers does).
  // `keep_in_fp32` (the model's _keep_in_fp32_modules) extends the skip list as Diffusers does.
  bool should_quantize(const std::string& module, const std::vector<std::string>& keep_in_fp32 = {}) const;
};

// The skip rule on its own (also used by callers that hold only the list).
bool bnb_module_skipped(const std::string& module, const std::vector<std::string>& skip);

}  // namespace diffq::quant
