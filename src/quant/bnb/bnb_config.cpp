#include "quant/bnb/bnb_config.h"

#include <algorithm>
#include <array>

#include "diffq/error.h"

namespace diffq::quant {

namespace {

constexpr const char* kCtx = "bnb.config";

std::string shown(const nlohmann::json& v) { return v.dump(); }

bool get_bool(const nlohmann::json& kw, const char* key, bool fallback, const char* msg) {
  const auto it = kw.find(key);
  if (it == kw.end()) return fallback;
  check(it->is_boolean(), kCtx, msg, " (got ", shown(*it), ")");
  return it->get<bool>();
}

// torch attribute names of the float dtypes diffq computes in (getattr(torch, name)).
std::optional<DType> torch_float_dtype(const std::string& s) {
  if (s == "float32" || s == "float") return DType::f32;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float16" || s == "half") return DType::f16;
  return std::nullopt;
}

}  // namespace

bool bnb_module_skipped(const std::string& module, const std::vector<std::string>& skip) {
  const size_t dot = module.rfind('.');
  const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
  for (const std::string& key : skip) {
    if (key == last || key == module) return true;
    if (module.find(key + ".") != std::string::npos) return true;
  }
  return false;
}

BitsAndBytesConfig BitsAndBytesConfig::from_kwargs(const nlohmann::json& kw) {
  check(kw.is_object(), kCtx, "BitsAndBytesConfig kwargs must be a JSON object, got ", shown(kw));
  static const std::array<const char*, 13> known = {
      "load_in_8bit", "load_in_4bit", "llm_int8_threshold", "llm_int8_skip_modules",
      "llm_int8_enable_fp32_cpu_offload", "llm_int8_has_fp16_weight", "bnb_4bit_compute_dtype",
      "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_quant_storage",
      // _exclude_attributes_at_init: present in a saved quantization_config, never warned about.
      "_load_in_4bit", "_load_in_8bit", "quant_method"};
  BitsAndBytesConfig c;
  for (auto it = kw.begin(); it != kw.end(); ++it)
    if (std::find_if(known.begin(), known.end(), [&](const char* k) { return it.key() == k; }) == known.end())
      c.unused_kwargs.push_back(it.key());

  c.load_in_8bit = get_bool(kw, "load_in_8bit", false, "load_in_8bit must be a boolean");
  c.load_in_4bit = get_bool(kw, "load_in_4bit", false, "load_in_4bit must be a boolean");
  check(!(c.load_in_4bit && c.load_in_8bit), kCtx,
        "load_in_4bit and load_in_8bit are both True, but only one can be used at the same time");
  if (auto it = kw.find("llm_int8_threshold"); it != kw.end()) {
    check(it->is_number_float(), kCtx, "llm_int8_threshold must be a float (got ", shown(*it), ")");
    c.llm_int8_threshold = it->get<double>();
  }
  if (auto it = kw.find("llm_int8_skip_modules"); it != kw.end() && !it->is_null()) {
    check(it->is_array(), kCtx, "llm_int8_skip_modules must be a list of strings (got ", shown(*it), ")");
    std::vector<std::string> v;
    for (const auto& e : *it) {
      check(e.is_string(), kCtx, "llm_int8_skip_modules must be a list of strings (got ", shown(*it), ")");
      v.push_back(e.get<std::string>());
    }
    c.llm_int8_skip_modules = std::move(v);
  }
  c.llm_int8_enable_fp32_cpu_offload =
      get_bool(kw, "llm_int8_enable_fp32_cpu_offload", false, "llm_int8_enable_fp32_cpu_offload must be a boolean");
  c.llm_int8_has_fp16_weight =
      get_bool(kw, "llm_int8_has_fp16_weight", false, "llm_int8_has_fp16_weight must be a boolean");
  if (auto it = kw.find("bnb_4bit_compute_dtype"); it != kw.end() && !it->is_null()) {
    check(it->is_string(), kCtx, "bnb_4bit_compute_dtype must be a string or a torch.dtype (got ", shown(*it), ")");
    std::string s = it->get<std::string>();
    if (s.rfind("torch.", 0) == 0) s = s.substr(6);  // a str(torch.dtype) spelling
    const auto d = torch_float_dtype(s);
    check(d.has_value(), kCtx, "bnb_4bit_compute_dtype ", shown(*it),
          " is not a float dtype diffq computes in (float32, bfloat16, float16)");
    c.bnb_4bit_compute_dtype = *d;
  }
  if (auto it = kw.find("bnb_4bit_quant_type"); it != kw.end()) {
    check(it->is_string(), kCtx, "bnb_4bit_quant_type must be a string (got ", shown(*it), ")");
    c.bnb_4bit_quant_type = it->get<std::string>();
    check(c.bnb_4bit_quant_type == "nf4" || c.bnb_4bit_quant_type == "fp4", kCtx,
          "quant_type must be 'nf4' or 'fp4', got '", c.bnb_4bit_quant_type, "'");
  }
  c.bnb_4bit_use_double_quant =
      get_bool(kw, "bnb_4bit_use_double_quant", false, "bnb_4bit_use_double_quant must be a boolean");
  if (auto it = kw.find("bnb_4bit_quant_storage"); it != kw.end() && !it->is_null()) {
    check(it->is_string(), kCtx, "bnb_4bit_quant_storage must be a string or a torch.dtype (got ", shown(*it), ")");
    const std::string s = it->get<std::string>();
    static const std::array<const char*, 6> ok = {"float16", "float32", "int8", "uint8", "float64", "bfloat16"};
    check(std::find_if(ok.begin(), ok.end(), [&](const char* k) { return s == k; }) != ok.end(), kCtx,
          "`bnb_4bit_quant_storage` must be a valid string (one of 'float16', 'float32', 'int8', 'uint8', "
          "'float64', 'bfloat16') (got '", s, "')");
    c.bnb_4bit_quant_storage = s;
  }
  return c;
}

nlohmann::json BitsAndBytesConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  j["_load_in_4bit"] = load_in_4bit;
  j["_load_in_8bit"] = load_in_8bit;
  j["bnb_4bit_compute_dtype"] = std::string(dtype_name(bnb_4bit_compute_dtype));
  j["bnb_4bit_quant_storage"] = bnb_4bit_quant_storage;
  j["bnb_4bit_quant_type"] = bnb_4bit_quant_type;
  j["bnb_4bit_use_double_quant"] = bnb_4bit_use_double_quant;
  j["llm_int8_enable_fp32_cpu_offload"] = llm_int8_enable_fp32_cpu_offload;
  j["llm_int8_has_fp16_weight"] = llm_int8_has_fp16_weight;
  j["llm_int8_skip_modules"] = llm_int8_skip_modules ? nlohmann::json(*llm_int8_skip_modules) : nlohmann::json();
  j["llm_int8_threshold"] = llm_int8_threshold;
  j["load_in_4bit"] = load_in_4bit;
  j["load_in_8bit"] = load_in_8bit;
  j["quant_method"] = "bitsandbytes";
  return j;
}

std::string BitsAndBytesConfig::scheme() const {
  if (load_in_8bit) return "bnb_int8";
  check(load_in_4bit, kCtx, "neither load_in_4bit nor load_in_8bit is set: nothing to quantize");
  return "bnb_" + bnb_4bit_quant_type;
}

bool BitsAndBytesConfig::should_quantize(const std::string& module, const std::vector<std::string>& keep_in_fp32) const {
  std::vector<std::string> skip = llm_int8_skip_modules.value_or(std::vector<std::string>{});
  skip.insert(skip.end(), keep_in_fp32.begin(), keep_in_fp32.end());
  return !bnb_module_skipped(module, skip);
}

}  // namespace diffq::quant
