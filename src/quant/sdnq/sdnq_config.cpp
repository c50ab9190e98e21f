#include "quant/sdnq/sdnq_config.h"

#include <algorithm>
#include <regex>
#include <sstream>

#include "diffq/error.h"

namespace diffq::quant::sdnq {

namespace {
constexpr const char* kCtx = "sdnq.config";

// sdnq.common.module_skip_keys_dict[...][0] and common_skip_keys (the names the library adds to
// modules_to_not_convert when add_skip_keys is on).
const std::vector<std::string> kFluxSkip = {"single_transformer_blocks.0.norm.linear.weight", "time_text_embed",
                                            "time_embed", "context_embedder", "x_embedder", ".proj_out", "norm_out"};
const std::vector<std::string> kWanSkip = {"scale_shift_table", "patch_embedding", "condition_embedder", "proj_out",
                                           "norm_out"};
const std::vector<std::string> kCommonSkip = {
    ".time_embed", ".context_embedder", ".condition_embedder", ".x_embedder", ".t_embedder", ".y_embedder",
    ".proj_in",    ".emb_in",           ".txt_in",             ".img_in",     ".vid_in",     ".proj_out",
    ".norm_out",   ".emb_out",          ".txt_out",            ".img_out",    ".vid_out",    ".final_layer",
    "multi_modal_projector", "time_text_embed", "patch_embedding", "patch_embed", "patch_emb", "lm_head", "wte"};

const std::vector<std::string>& class_skip_keys(const std::string& module) {
  const std::string first = module.substr(0, module.find('.'));
  for (const char* f : {"transformer_blocks", "single_transformer_blocks", "x_embedder", "context_embedder",
                        "time_text_embed", "proj_out", "norm_out"})
    if (first == f) return kFluxSkip;  // (proj_out / norm_out: skipped by the Wan list as well)
  for (const char* w : {"blocks", "condition_embedder", "patch_embedding", "scale_shift_table"})
    if (first == w) return kWanSkip;
  return kCommonSkip;
}

// Options whose non-default values diffq refuses (field, why).
void refuse_truthy(const nlohmann::json& j, const char* field, const char* why) {
  if (!j.contains(field)) return;
  const auto& v = j.at(field);
  const bool on = v.is_boolean() ? v.get<bool>() : !(v.is_null() || (v.is_string() && v.get<std::string>() == "none") ||
                                                      (v.is_object() && v.empty()));
  check(!on, kCtx, field, "=", v.dump(), " is not supported by diffq (", why, ")");
}

template <class T>
T get_field(const nlohmann::json& j, const char* field, T def) {
  if (!j.contains(field) || j.at(field).is_null()) return def;
  try {
    return j.at(field).get<T>();
  } catch (const std::exception&) {
    fail(kCtx, field, " has the wrong type: ", j.at(field).dump());
  }
}
}  // namespace

SdnqConfig SdnqConfig::from_json(const nlohmann::json& j, bool pre_quantized) {
  check(j.is_object(), kCtx, "expected an object, got ", j.dump());
  SdnqConfig c;
  c.raw = j;
  if (j.contains("quant_method"))
    check(j.at("quant_method") == "sdnq", kCtx, "quant_method is ", j.at("quant_method").dump(), ", expected \"sdnq\"");
  c.weights_dtype = get_field<std::string>(j, "weights_dtype", "int8");
  sdnq_dtype(c.weights_dtype);  // throws naming the value
  c.group_size = get_field<int64_t>(j, "group_size", 0);
  check(c.group_size >= -2, kCtx, "group_size=", c.group_size, " (expected >= 0, -1 row-wise or -2 tensor-wise)");
  c.dequantize_fp32 = get_field<bool>(j, "dequantize_fp32", true);
  c.add_skip_keys = get_field<bool>(j, "add_skip_keys", true);
  c.minimum_allowed_numel = get_field<int64_t>(j, "minimum_allowed_numel", 16384);
  c.minimum_allowed_channel_size = get_field<int64_t>(j, "minimum_allowed_channel_size", 32);
  c.modules_to_not_convert = get_field<std::vector<std::string>>(j, "modules_to_not_convert", {});
  c.modules_dtype_dict =
      get_field<std::map<std::string, std::vector<std::string>>>(j, "modules_dtype_dict", {});
  refuse_truthy(j, "use_svd", "SVDQuant low-rank branches");
  refuse_truthy(j, "use_hadamard", "Hadamard rotations");
  refuse_truthy(j, "use_codebook", "codebook (Lloyd-Max) levels");
  refuse_truthy(j, "use_codebook_scale", "codebook scales");
  refuse_truthy(j, "scale_dtype", "double-quantized scales");
  refuse_truthy(j, "zero_point_dtype", "double-quantized zero points");
  refuse_truthy(j, "use_quantized_matmul", "its transposed int8/fp8 matmul layout");
  refuse_truthy(j, "modules_quant_config", "per-module quantization kwargs");
  refuse_truthy(j, "is_training", "SDNQ training tensors");
  if (!pre_quantized) {
    refuse_truthy(j, "use_stochastic_rounding", "random rounding cannot be reproduced");
    refuse_truthy(j, "use_dynamic_quantization", "the per-layer dtype search");
  }
  for (const auto& [key, mods] : c.modules_dtype_dict) {
    std::string k = key;
    std::transform(k.begin(), k.end(), k.begin(), ::tolower);
    if (k.rfind("minimum", 0) == 0 || (k.size() >= 3 && (k.ends_with("bit") || k.ends_with("bits")))) continue;
    sdnq_dtype(k, "modules_dtype_dict key");
  }
  return c;
}

nlohmann::json SdnqConfig::to_json(const std::vector<std::string>& dense_params) const {
  nlohmann::json j = {{"weights_dtype", weights_dtype},
                      {"scale_dtype", nullptr},
                      {"zero_point_dtype", nullptr},
                      {"quantized_matmul_dtype", nullptr},
                      {"hadamard_group_size", 256},
                      {"group_size", group_size},
                      {"svd_rank", 32},
                      {"svd_steps", 8},
                      {"codebook_steps", 24},
                      {"dynamic_loss_threshold", nullptr},
                      {"use_svd", false},
                      {"use_hadamard", false},
                      {"use_codebook", false},
                      {"use_codebook_scale", false},
                      {"use_grad_ckpt", true},
                      {"quant_conv", false},
                      {"quant_embedding", false},
                      {"use_quantized_matmul", false},
                      {"use_quantized_matmul_conv", false},
                      {"use_static_quantization", true},
                      {"use_dynamic_quantization", false},
                      {"use_stochastic_rounding", false},
                      {"dequantize_fp32", dequantize_fp32},
                      {"non_blocking", false},
                      {"add_skip_keys", add_skip_keys},
                      {"minimum_allowed_numel", minimum_allowed_numel},
                      {"minimum_allowed_channel_size", minimum_allowed_channel_size},
                      {"modules_to_not_use_matmul", nlohmann::json::array()},
                      {"modules_dtype_dict", modules_dtype_dict},
                      {"modules_quant_config", nlohmann::json::object()},
                      {"quantization_device", nullptr},
                      {"return_device", nullptr},
                      {"is_training", false},
                      {"sdnq_version", "0.2.8"}};
  for (const auto& [k, v] : raw.items()) j[k] = v;
  std::vector<std::string> skip = modules_to_not_convert;
  for (const auto& p : dense_params)
    if (std::find(skip.begin(), skip.end(), p) == skip.end()) skip.push_back(p);
  j["modules_to_not_convert"] = skip;
  const SdnqDtype& d = sdnq_dtype(weights_dtype);
  j["is_integer"] = d.is_integer;
  j["is_unsigned"] = d.is_unsigned;
  j["quant_method"] = "sdnq";
  return j;
}

bool SdnqConfig::name_in(const std::string& param, const std::vector<std::string>& list) {
  std::vector<std::string> parts;
  {
    std::stringstream ss(param);
    for (std::string s; std::getline(ss, s, '.');) parts.push_back(s);
  }
  for (const std::string& p : list) {
    if (!p.empty() && p[0] == '.') {
      if (param.rfind(p.substr(1), 0) == 0) return true;
      continue;
    }
    if (param == p || std::find(parts.begin(), parts.end(), p) != parts.end()) return true;
    if (p.find('*') != std::string::npos) {
      // re.match(p.replace(".*", "\\.*").replace("*", ".*"), param): anchored at the start only
      std::string rx;
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == '.' && i + 1 < p.size() && p[i + 1] == '*') {
          rx += "\\.*";
          ++i;
        } else if (p[i] == '*') {
          rx += ".*";
        } else {
          rx += p[i];
        }
      }
      try {
        if (std::regex_search(param, std::regex(rx), std::regex_constants::match_continuous)) return true;
      } catch (const std::regex_error&) {
        fail(kCtx, "module pattern '", p, "' is not a valid pattern");
      }
    }
  }
  return false;
}

const SdnqDtype& SdnqConfig::dtype_for(const std::string& module) const {
  const std::string param = module + ".weight";
  for (const auto& [key, mods] : modules_dtype_dict) {
    if (module.empty() || !name_in(param, mods)) continue;
    std::string k = key;
    std::transform(k.begin(), k.end(), k.begin(), ::tolower);
    if (k.rfind("minimum", 0) == 0 || k.ends_with("bit") || k.ends_with("bits")) {
      std::string b = k.substr(k.rfind("minimum", 0) == 0 ? 7 : 0);
      for (const char* pre : {"-", "_"})
        if (b.rfind(pre, 0) == 0) b = b.substr(1);
      for (const char* suf : {"bits", "bit"})
        if (b.ends_with(suf)) b = b.substr(0, b.size() - std::string(suf).size());
      for (const char* suf : {"-", "_"})
        if (b.ends_with(suf)) b.pop_back();
      bool is_unsigned = false;
      if (b.rfind("uint", 0) == 0) {
        is_unsigned = true;
        b = b.substr(4);
      } else if (b.rfind("int", 0) == 0) {
        b = b.substr(3);
      }
      int bits = 0;
      try {
        bits = std::stoi(b);
      } catch (const std::exception&) {
        fail(kCtx, "modules_dtype_dict key '", key, "' is not a dtype or minimum_<n>bit");
      }
      if (sdnq_dtype(weights_dtype).bits < bits)
        return sdnq_dtype((is_unsigned || bits <= 4 ? "uint" : "int") + std::to_string(bits), "modules_dtype_dict key");
      continue;  // already wide enough: the next key may still apply
    }
    return sdnq_dtype(key, "modules_dtype_dict key");
  }
  return sdnq_dtype(weights_dtype);
}

bool SdnqConfig::should_quantize(const std::string& module, const Shape& shape) const {
  if (shape.size() != 2) return false;
  const std::string param = module + ".weight";
  if (name_in(param, modules_to_not_convert)) return false;
  if (add_skip_keys && name_in(param, class_skip_keys(module))) return false;
  return shape[1] >= minimum_allowed_channel_size && shape[0] * shape[1] >= minimum_allowed_numel;
}

}  // namespace diffq::quant::sdnq
