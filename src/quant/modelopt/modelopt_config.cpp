#include "quant/modelopt/modelopt_config.h"

#include "diffq/error.h"

namespace diffq::quant {

namespace {
constexpr const char* kCtx = "modelopt";
constexpr const char* kKnown =
    "FP8, FP8_PER_CHANNEL_PER_TOKEN, W8A8_SQ_PER_CHANNEL, INT8_SQ, INT8_WO, W8A16, W4A16_AWQ, NVFP4, W4A16_NVFP4, "
    "MIXED_PRECISION";
}  // namespace

std::optional<ModelOptAlgo> parse_modelopt_algo(const std::string& a) {
  if (a == "FP8") return ModelOptAlgo::fp8;
  if (a == "FP8_PER_CHANNEL_PER_TOKEN") return ModelOptAlgo::fp8_per_channel;
  if (a == "W8A8_SQ_PER_CHANNEL" || a == "INT8_SQ" || a == "INT8_WO" || a == "W8A16") return ModelOptAlgo::int8;
  if (a == "W4A16_AWQ" || a == "INT4_AWQ") return ModelOptAlgo::int4_awq;
  if (a == "NVFP4" || a == "W4A16_NVFP4") return ModelOptAlgo::nvfp4;
  return std::nullopt;
}

const char* modelopt_scheme_name(ModelOptAlgo a) {
  switch (a) {
    case ModelOptAlgo::fp8: return "modelopt_fp8";
    case ModelOptAlgo::fp8_per_channel: return "modelopt_fp8_pc";
    case ModelOptAlgo::int8: return "modelopt_int8";
    case ModelOptAlgo::int4_awq: return "modelopt_int4_awq";
    case ModelOptAlgo::nvfp4: return "modelopt_nvfp4";
  }
  return "modelopt";
}

ModelOptConfig ModelOptConfig::from_json(const nlohmann::json& qc, const std::string& source) {
  ModelOptConfig c;
  c.raw = qc;
  check(!(qc.contains("quant_type") && !qc.contains("quant_algo")), kCtx, source,
        ": quantization_config has quant_type (Diffusers' NVIDIAModelOptConfig, saved with ModelOpt's restore "
        "state), not quant_algo: diffq reads ModelOpt's exports (modelopt.torch.export.export_hf_checkpoint)");
  check(qc.contains("quant_algo") && qc.at("quant_algo").is_string(), kCtx, source,
        ": quantization_config has no string \"quant_algo\"");
  c.quant_algo = qc.at("quant_algo").get<std::string>();
  if (qc.contains("ignore") && qc.at("ignore").is_array())
    for (const auto& m : qc.at("ignore")) c.ignore.push_back(m.get<std::string>());
  if (c.quant_algo == "MIXED_PRECISION") {
    check(qc.contains("quantized_layers") && qc.at("quantized_layers").is_object(), kCtx, source,
          ": quant_algo MIXED_PRECISION without a \"quantized_layers\" object");
    for (const auto& [m, v] : qc.at("quantized_layers").items()) {
      check(v.is_object() && v.contains("quant_algo") && v.at("quant_algo").is_string(), kCtx, source,
            ": quantized_layers.", m, " has no quant_algo");
      const std::string a = v.at("quant_algo").get<std::string>();
      check(parse_modelopt_algo(a).has_value(), kCtx, source, ": quantized_layers.", m, ".quant_algo '", a,
            "' is not supported (diffq: ", kKnown, ")");
      c.layer_algo[m] = a;
    }
  } else {
    check(parse_modelopt_algo(c.quant_algo).has_value(), kCtx, source, ": quant_algo '", c.quant_algo,
          "' is not supported (diffq: ", kKnown, ")");
  }
  return c;
}

std::optional<ModelOptAlgo> ModelOptConfig::algo_for(const std::string& module) const {
  if (quant_algo != "MIXED_PRECISION") return parse_modelopt_algo(quant_algo);
  auto it = layer_algo.find(module);
  if (it == layer_algo.end()) return std::nullopt;
  return parse_modelopt_algo(it->second);
}

}  // namespace diffq::quant
