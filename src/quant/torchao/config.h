// The user's torchao configuration (torchao 0.18 AOBaseConfig classes, version 2), parsed from every
// JSON form Diffusers writes or a user gives:
//   config.json          {"quant_method": "torchao", "quant_type": {"default": {"_type": ..., "_data": ...}},
//                         "modules_to_not_convert": null | [...]}
//   a config dict        {"_type": "Int8WeightOnlyConfig", "_version": 2, "_data": {...}} (config_to_dict)
//   quant_kwargs         {"quant_type": <config dict> | "Int8WeightOnlyConfig" | legacy "int8wo",
//                         "quant_type_kwargs": {...}, "modules_to_not_convert": [...]}
// Legacy strings (Diffusers < 0.38): int8wo, int8dq, int4wo, float8wo[_e4m3|_e5m2],
// float8dq[_e4m3[_tensor|_row]] map to the version-2 config torchao 0.18 would use; uint1wo..uint7wo,
// int4dq and fpX_eAmB are reported as not supported (naming the string).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diffq/dtype.h"
#include "quant/torchao/affine.h"

namespace diffq::quant::torchao {

enum class Kind {
  Int8WeightOnly,                     // Int8WeightOnlyConfig -> Int8Tensor
  Int8DynamicActivationInt8Weight,    // Int8DynamicActivationInt8WeightConfig -> Int8Tensor + act kwargs
  Int4WeightOnly,                     // Int4WeightOnlyConfig (plain) -> Int4Tensor
  Float8WeightOnly,                   // Float8WeightOnlyConfig -> Float8Tensor
  Float8DynamicActivationFloat8Weight,// Float8DynamicActivationFloat8WeightConfig -> Float8Tensor + act kwargs
  IntxWeightOnly,                     // IntxWeightOnlyConfig (unpacked to int8) -> IntxUnpackedToInt8Tensor
};

struct Granularity {
  enum Type { PerTensor, PerRow, PerGroup, PerAxis } type = PerRow;
  int64_t group_size = 0;  // PerGroup
  int64_t dim = -1;        // PerRow dim / PerAxis axis
  nlohmann::json to_json() const;  // torchao config_to_dict form
  static Granularity parse(const nlohmann::json& j, const std::string& field);
  bool operator==(const Granularity& o) const {
    return type == o.type && group_size == o.group_size && dim == o.dim;
  }
};

struct Config {
  Kind kind = Kind::Int8WeightOnly;
  Granularity granularity;                    // the weight's
  Granularity act_granularity;                // dynamic-activation schemes
  int64_t group_size = 128;                   // Int4WeightOnlyConfig
  int bits = 8;                               // IntxWeightOnlyConfig weight_dtype torch.int<bits>
  MappingType mapping = MappingType::Symmetric;      // Intx weight mapping
  MappingType act_mapping = MappingType::Symmetric;  // Int8DynamicActivationInt8WeightConfig
  std::optional<DType> scale_dtype;           // IntxWeightOnlyConfig scale_dtype
  DType weight_float8 = DType::f8_e4m3fn;     // float8 configs
  DType act_float8 = DType::f8_e4m3fn;
  std::optional<std::vector<std::string>> modules_to_not_convert;
  std::string legacy_name;  // set when parsed from a legacy string (kept for to_json)

  static Config from_json(const nlohmann::json& j);
  // The config.json quantization_config: {"quant_method": "torchao", "modules_to_not_convert": ...,
  // "quant_type": {"default": <config_to_dict>}} exactly as Diffusers writes it.
  nlohmann::json to_json() const;
  nlohmann::json config_dict() const;  // torchao config_to_dict of the AOBaseConfig alone
  std::string type_name() const;       // "Int8WeightOnlyConfig", ...
  bool dynamic_activation() const {
    return kind == Kind::Int8DynamicActivationInt8Weight || kind == Kind::Float8DynamicActivationFloat8Weight;
  }
};

}  // namespace diffq::quant::torchao
