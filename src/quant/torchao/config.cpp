#include "quant/torchao/config.h"

#include <algorithm>

#include "diffq/error.h"

namespace diffq::quant::torchao {

using nlohmann::json;

namespace {

constexpr const char* kCtx = "torchao.config";

// {"_type": T, "_data": D} -> D (torchao's wrapped enums, dtypes and dataclasses); anything else as is.
const json& unwrap(const json& j) {
  if (j.is_object() && j.contains("_type") && j.contains("_data")) return j["_data"];
  return j;
}

std::string string_field(const json& j, const std::string& field) {
  const json& v = unwrap(j);
  check(v.is_string(), kCtx, "field '", field, "' must be a string (or {\"_type\", \"_data\"}), got ", j.dump());
  return v.get<std::string>();
}

std::string strip_torch(std::string s) {
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  return s;
}

// torch.int1 .. torch.int8 -> bits.
int parse_int_dtype(const json& j, const std::string& field) {
  const std::string s = strip_torch(string_field(j, field));
  for (int b = 1; b <= 8; ++b)
    if (s == "int" + std::to_string(b)) return b;
  fail(kCtx, "field '", field, "' must be torch.int1 .. torch.int8, got '", s, "'");
}

DType parse_float8_dtype(const json& j, const std::string& field) {
  const std::string s = strip_torch(string_field(j, field));
  if (s == "float8_e4m3fn") return DType::f8_e4m3fn;
  if (s == "float8_e5m2") return DType::f8_e5m2;
  fail(kCtx, "field '", field, "' must be float8_e4m3fn or float8_e5m2, got '", s, "'");
}

MappingType parse_mapping(const json& j, const std::string& field) {
  std::string s = string_field(j, field);
  if (s.rfind("MappingType.", 0) == 0) s = s.substr(12);
  std::transform(s.begin(), s.end(), s.begin(), ::toupper);
  if (s == "SYMMETRIC") return MappingType::Symmetric;
  if (s == "ASYMMETRIC") return MappingType::Asymmetric;
  if (s == "SYMMETRIC_NO_CLIPPING_ERR") return MappingType::SymmetricNoClippingErr;
  fail(kCtx, "field '", field, "' must be SYMMETRIC, ASYMMETRIC or SYMMETRIC_NO_CLIPPING_ERR, got '", s, "'");
}

const char* mapping_name(MappingType m) {
  switch (m) {
    case MappingType::Symmetric: return "SYMMETRIC";
    case MappingType::Asymmetric: return "ASYMMETRIC";
    default: return "SYMMETRIC_NO_CLIPPING_ERR";
  }
}

json wrapped(const std::string& type, json data) { return json{{"_type", type}, {"_data", std::move(data)}}; }
json dtype_json(const std::string& name) { return wrapped("torch.dtype", name); }
std::string float8_name(DType d) { return d == DType::f8_e5m2 ? "float8_e5m2" : "float8_e4m3fn"; }

// Optional field: absent or null -> nullptr.
const json* opt(const json& data, const char* key) {
  if (!data.is_object() || !data.contains(key) || data[key].is_null()) return nullptr;
  return &data[key];
}

void require_value(const json& data, const char* key, const std::string& expected, const std::string& cls) {
  if (const json* v = opt(data, key)) {
    const std::string got = string_field(*v, key);
    check(got == expected, kCtx, cls, ": ", key, " '", got, "' is not supported (only ", expected, ")");
  }
}

// A granularity list of two for the dynamic-activation configs: [activation, weight].
std::pair<Granularity, Granularity> act_weight_granularity(const json* g, Granularity dflt, const std::string& cls) {
  if (!g) return {dflt, dflt};
  if (g->is_array()) {
    check(g->size() == 2, kCtx, cls, ": granularity list must have exactly 2 elements, got ", g->size());
    return {Granularity::parse((*g)[0], "granularity[0]"), Granularity::parse((*g)[1], "granularity[1]")};
  }
  const Granularity one = Granularity::parse(*g, "granularity");
  return {one, one};
}

Config parse_class(const std::string& cls, const json& data_in, const json* version) {
  const json data = data_in.is_null() ? json::object() : data_in;
  check(data.is_object(), kCtx, cls, ": _data must be an object, got ", data.dump());
  int ver = 2;
  if (version && version->is_number_integer()) ver = version->get<int>();
  if (const json* v = opt(data, "version")) ver = v->get<int>();
  check(ver == 2, kCtx, cls, ": version ", ver, " is not supported (torchao 0.18 has only version 2 configs)");
  Config c;
  if (cls == "Int8WeightOnlyConfig") {
    c.kind = Kind::Int8WeightOnly;
    if (const json* gs = opt(data, "group_size"))
      fail(kCtx, cls, ": group_size=", gs->dump(), " is version-1 only; use granularity PerGroup(", gs->dump(), ")");
    c.granularity = Granularity{Granularity::PerRow, 0, -1};
    if (const json* g = opt(data, "granularity")) c.granularity = Granularity::parse(*g, "granularity");
    check(c.granularity.type != Granularity::PerAxis, kCtx, cls, ": granularity must be PerTensor, PerRow or PerGroup");
  } else if (cls == "Int8DynamicActivationInt8WeightConfig") {
    c.kind = Kind::Int8DynamicActivationInt8Weight;
    auto [a, w] = act_weight_granularity(opt(data, "granularity"), Granularity{Granularity::PerRow, 0, -1}, cls);
    for (const Granularity* g : {&a, &w})
      check(g->type == Granularity::PerTensor || g->type == Granularity::PerRow, kCtx, cls,
            ": granularity must be PerTensor or PerRow, got ", g->to_json().dump());
    check(a.type != Granularity::PerRow || a.dim == -1, kCtx, cls,
          ": only PerRow(dim=-1) is supported for activations, got dim=", a.dim);
    c.act_granularity = a;
    c.granularity = w;
    if (const json* m = opt(data, "act_mapping_type")) c.act_mapping = parse_mapping(*m, "act_mapping_type");
    check(c.act_mapping != MappingType::SymmetricNoClippingErr, kCtx, cls,
          ": act_mapping_type must be SYMMETRIC or ASYMMETRIC");
    check(c.act_mapping == MappingType::Symmetric, kCtx, cls,
          ": act_mapping_type ASYMMETRIC is not supported yet (only SYMMETRIC)");
    if (const json* rr = opt(data, "reduce_range"))
      check(!rr->get<bool>(), kCtx, cls, ": reduce_range=true is not supported yet");
  } else if (cls == "Int4WeightOnlyConfig") {
    c.kind = Kind::Int4WeightOnly;
    if (const json* gs = opt(data, "group_size")) c.group_size = gs->get<int64_t>();
    check(c.group_size == 32 || c.group_size == 64 || c.group_size == 128 || c.group_size == 256, kCtx, cls,
          ": group_size must be 32, 64, 128 or 256, got ", c.group_size);
    require_value(data, "int4_packing_format", "PLAIN", cls);
    require_value(data, "int4_choose_qparams_algorithm", "TINYGEMM", cls);
    c.granularity = Granularity{Granularity::PerGroup, c.group_size, -1};
  } else if (cls == "Float8WeightOnlyConfig") {
    c.kind = Kind::Float8WeightOnly;
    if (const json* d = opt(data, "weight_dtype")) c.weight_float8 = parse_float8_dtype(*d, "weight_dtype");
    c.granularity = Granularity{Granularity::PerRow, 0, -1};
    if (const json* g = opt(data, "granularity")) c.granularity = Granularity::parse(*g, "granularity");
    check(c.granularity.type != Granularity::PerAxis, kCtx, cls, ": granularity must be PerTensor, PerRow or PerGroup");
  } else if (cls == "Float8DynamicActivationFloat8WeightConfig") {
    c.kind = Kind::Float8DynamicActivationFloat8Weight;
    if (const json* d = opt(data, "activation_dtype")) c.act_float8 = parse_float8_dtype(*d, "activation_dtype");
    if (const json* d = opt(data, "weight_dtype")) c.weight_float8 = parse_float8_dtype(*d, "weight_dtype");
    auto [a, w] = act_weight_granularity(opt(data, "granularity"), Granularity{Granularity::PerTensor, 0, -1}, cls);
    check((a.type == Granularity::PerTensor || a.type == Granularity::PerRow) &&
              (w.type == Granularity::PerTensor || w.type == Granularity::PerRow),
          kCtx, cls, ": granularity must be PerTensor or PerRow, got ", a.to_json().dump(), ", ", w.to_json().dump());
    check(a.type == w.type, kCtx, cls, ": different granularities for activation and weight are not supported: ",
          a.to_json().dump(), ", ", w.to_json().dump());
    c.act_granularity = a;
    c.granularity = w;
    require_value(data, "packing_format", "PLAIN", cls);
    check(!opt(data, "activation_value_lb") && !opt(data, "activation_value_ub"), kCtx, cls,
          ": activation_value_lb/ub are not supported yet");
  } else if (cls == "IntxWeightOnlyConfig") {
    c.kind = Kind::IntxWeightOnly;
    if (const json* d = opt(data, "weight_dtype")) c.bits = parse_int_dtype(*d, "weight_dtype");
    c.granularity = Granularity{Granularity::PerAxis, 0, 0};
    if (const json* g = opt(data, "granularity")) c.granularity = Granularity::parse(*g, "granularity");
    check(c.granularity.type == Granularity::PerAxis || c.granularity.type == Granularity::PerGroup, kCtx, cls,
          ": granularity must be PerAxis(0) or PerGroup, got ", c.granularity.to_json().dump());
    check(c.granularity.type != Granularity::PerAxis || c.granularity.dim == 0, kCtx, cls,
          ": axis must be 0 with PerAxis, got ", c.granularity.dim);
    if (const json* m = opt(data, "mapping_type")) c.mapping = parse_mapping(*m, "mapping_type");
    if (const json* s = opt(data, "scale_dtype")) {
      const DType d = parse_dtype(strip_torch(string_field(*s, "scale_dtype")));
      check(d == DType::f32 || d == DType::bf16 || d == DType::f16, kCtx, cls,
            ": scale_dtype must be a float dtype, got ", dtype_name(d));
      c.scale_dtype = d;
    }
    require_value(data, "intx_packing_format", "UNPACKED_TO_INT8", cls);
    require_value(data, "intx_choose_qparams_algorithm", "AFFINE", cls);
  } else {
    fail(kCtx, "unknown torchao config '", cls, "' (supported: Int8WeightOnlyConfig, Int4WeightOnlyConfig, ",
         "Float8WeightOnlyConfig, Float8DynamicActivationFloat8WeightConfig, IntxWeightOnlyConfig, ",
         "Int8DynamicActivationInt8WeightConfig, and the legacy strings int8wo, int8dq, int4wo, float8wo, ",
         "float8dq_e4m3_tensor, float8dq_e4m3_row)");
  }
  if (c.granularity.type == Granularity::PerGroup)
    check(c.granularity.group_size > 0, kCtx, cls, ": group_size must be positive, got ", c.granularity.group_size);
  return c;
}

// Diffusers < 0.38 strings -> the version-2 config.
Config parse_legacy(const std::string& name, const json& kwargs) {
  const json kw = kwargs.is_null() ? json::object() : kwargs;
  check(kw.is_object(), kCtx, "quant_type_kwargs must be an object, got ", kw.dump());
  Config c;
  auto group = [&](int64_t dflt) { return kw.contains("group_size") && !kw["group_size"].is_null() ? kw["group_size"].get<int64_t>() : dflt; };
  if (name == "int8wo" || name == "int8_weight_only") {
    json d = json::object();
    if (kw.contains("group_size") && !kw["group_size"].is_null())
      d["granularity"] = wrapped("PerGroup", {{"group_size", group(0)}});
    c = parse_class("Int8WeightOnlyConfig", d, nullptr);
  } else if (name == "int8dq" || name == "int8_dynamic_activation_int8_weight") {
    c = parse_class("Int8DynamicActivationInt8WeightConfig", json::object(), nullptr);
  } else if (name == "int4wo" || name == "int4_weight_only") {
    c = parse_class("Int4WeightOnlyConfig", {{"group_size", group(128)}}, nullptr);
  } else if (name == "float8wo" || name == "float8_weight_only" || name == "float8wo_e4m3" || name == "float8wo_e5m2") {
    c = parse_class("Float8WeightOnlyConfig",
                    {{"weight_dtype", name == "float8wo_e5m2" ? "float8_e5m2" : "float8_e4m3fn"}}, nullptr);
  } else if (name == "float8dq" || name == "float8dq_e4m3" || name == "float8dq_e4m3_tensor" ||
             name == "float8_dynamic_activation_float8_weight") {
    c = parse_class("Float8DynamicActivationFloat8WeightConfig", {{"granularity", "PerTensor"}}, nullptr);
  } else if (name == "float8dq_e4m3_row") {
    c = parse_class("Float8DynamicActivationFloat8WeightConfig", {{"granularity", "PerRow"}}, nullptr);
  } else if ((name.size() == 7 && name.rfind("uint", 0) == 0 && name.substr(5) == "wo" && name[4] >= '1' &&
              name[4] <= '8') ||
             name == "uintx_weight_only") {
    fail(kCtx, "legacy quant_type '", name, "' (UIntX weight-only, bit-packed uint", name.size() == 7 ? name.substr(4, 1) : "X",
         ") is not supported yet");
  } else if (name == "int4dq" || name.rfind("fp", 0) == 0 || name.rfind("float8dq_e5m2", 0) == 0) {
    fail(kCtx, "legacy quant_type '", name, "' is not supported yet");
  } else {
    fail(kCtx, "unknown torchao quant_type '", name, "' (legacy names: int8wo, int8dq, int4wo, float8wo, ",
         "float8wo_e4m3, float8wo_e5m2, float8dq, float8dq_e4m3_tensor, float8dq_e4m3_row; or a config class ",
         "such as Int8WeightOnlyConfig)");
  }
  c.legacy_name = name;
  return c;
}

bool is_class_name(const std::string& s) { return s.size() > 6 && s.compare(s.size() - 6, 6, "Config") == 0; }

}  // namespace

json Granularity::to_json() const {
  switch (type) {
    case PerTensor: return json{{"_type", "PerTensor"}, {"_version", 1}, {"_data", json::object()}};
    case PerRow: return json{{"_type", "PerRow"}, {"_version", 1}, {"_data", {{"dim", dim}}}};
    case PerGroup: return json{{"_type", "PerGroup"}, {"_version", 1}, {"_data", {{"group_size", group_size}}}};
    default: return json{{"_type", "PerAxis"}, {"_version", 1}, {"_data", {{"axis", dim}}}};
  }
}

Granularity Granularity::parse(const json& j, const std::string& field) {
  std::string type;
  json data = json::object();
  if (j.is_string()) {
    type = j.get<std::string>();
  } else if (j.is_object() && j.contains("_type")) {
    type = j["_type"].get<std::string>();
    if (j.contains("_data") && j["_data"].is_object()) data = j["_data"];
  } else {
    fail(kCtx, "field '", field, "' must be a granularity (\"PerRow\", {\"_type\": \"PerGroup\", \"_data\": ",
         "{\"group_size\": 32}}, ...), got ", j.dump());
  }
  Granularity g;
  if (type == "PerTensor") {
    g.type = PerTensor;
  } else if (type == "PerRow") {
    g.type = PerRow;
    g.dim = data.value("dim", int64_t(-1));
  } else if (type == "PerGroup") {
    g.type = PerGroup;
    check(data.contains("group_size") && data["group_size"].is_number_integer(), kCtx, "field '", field,
          "': PerGroup needs an integer group_size, got ", j.dump());
    g.group_size = data["group_size"].get<int64_t>();
  } else if (type == "PerAxis") {
    g.type = PerAxis;
    g.dim = data.value("axis", int64_t(0));
  } else {
    fail(kCtx, "field '", field, "': unsupported granularity '", type, "' (PerTensor, PerRow, PerGroup, PerAxis)");
  }
  return g;
}

Config Config::from_json(const json& j) {
  check(j.is_object() || j.is_string(), kCtx, "expected a JSON object or a config name, got ", j.dump());
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    return is_class_name(s) ? parse_class(s, json::object(), nullptr) : parse_legacy(s, json::object());
  }
  if (j.contains("quant_method") && !j["quant_method"].is_null())
    check(j["quant_method"] == "torchao", kCtx, "quant_method is ", j["quant_method"].dump(), ", not \"torchao\"");
  Config c;
  if (j.contains("quant_type")) {
    json qt = j["quant_type"];
    const json kwargs = j.value("quant_type_kwargs", json::object());
    if (qt.is_object() && qt.contains("default") && !qt.contains("_type")) {
      check(qt.size() == 1, kCtx, "quant_type must hold only the key 'default', got ", qt.dump());
      qt = qt["default"];
    }
    if (qt.is_string()) {
      const std::string s = qt.get<std::string>();
      c = is_class_name(s) ? parse_class(s, kwargs, nullptr) : parse_legacy(s, kwargs);
    } else {
      check(qt.is_object() && qt.contains("_type") && qt["_type"].is_string(), kCtx,
            "quant_type must be a config name or {\"_type\", \"_data\"}, got ", qt.dump());
      c = parse_class(qt["_type"].get<std::string>(), qt.value("_data", json::object()),
                      qt.contains("_version") ? &qt["_version"] : nullptr);
    }
  } else if (j.contains("_type")) {
    check(j["_type"].is_string(), kCtx, "_type must be a string, got ", j["_type"].dump());
    c = parse_class(j["_type"].get<std::string>(), j.value("_data", json::object()),
                    j.contains("_version") ? &j["_version"] : nullptr);
  } else {
    fail(kCtx, "no 'quant_type' (nor '_type') in ", j.dump());
  }
  if (j.contains("modules_to_not_convert") && !j["modules_to_not_convert"].is_null()) {
    const json& m = j["modules_to_not_convert"];
    check(m.is_array() || m.is_string(), kCtx, "modules_to_not_convert must be a list of names, got ", m.dump());
    c.modules_to_not_convert = m.is_string() ? std::vector<std::string>{m.get<std::string>()}
                                             : m.get<std::vector<std::string>>();
  }
  return c;
}

std::string Config::type_name() const {
  switch (kind) {
    case Kind::Int8WeightOnly: return "Int8WeightOnlyConfig";
    case Kind::Int8DynamicActivationInt8Weight: return "Int8DynamicActivationInt8WeightConfig";
    case Kind::Int4WeightOnly: return "Int4WeightOnlyConfig";
    case Kind::Float8WeightOnly: return "Float8WeightOnlyConfig";
    case Kind::Float8DynamicActivationFloat8Weight: return "Float8DynamicActivationFloat8WeightConfig";
    default: return "IntxWeightOnlyConfig";
  }
}

json Config::config_dict() const {
  json d;
  switch (kind) {
    case Kind::Int8WeightOnly:
      d = {{"group_size", nullptr}, {"granularity", granularity.to_json()}, {"set_inductor_config", true}};
      break;
    case Kind::Int8DynamicActivationInt8Weight:
      d = {{"act_mapping_type", wrapped("MappingType", mapping_name(act_mapping))},
           {"weight_only_decode", false},
           {"granularity", act_granularity == granularity ? granularity.to_json()
                                                          : json::array({act_granularity.to_json(), granularity.to_json()})},
           {"set_inductor_config", true},
           {"reduce_range", false}};
      break;
    case Kind::Int4WeightOnly:
      d = {{"group_size", group_size},
           {"set_inductor_config", true},
           {"int4_packing_format", wrapped("Int4PackingFormat", "PLAIN")},
           {"int4_choose_qparams_algorithm", wrapped("Int4ChooseQParamsAlgorithm", "TINYGEMM")},
           {"int4_tile_packed_ntile", 8}};
      break;
    case Kind::Float8WeightOnly:
      d = {{"weight_dtype", dtype_json(float8_name(weight_float8))},
           {"set_inductor_config", true},
           {"granularity", granularity.to_json()}};
      break;
    case Kind::Float8DynamicActivationFloat8Weight:
      d = {{"activation_dtype", dtype_json(float8_name(act_float8))},
           {"weight_dtype", dtype_json(float8_name(weight_float8))},
           {"granularity", json::array({act_granularity.to_json(), granularity.to_json()})},
           {"packing_format", wrapped("Float8PackingFormat", "PLAIN")},
           {"mm_config", json{{"_type", "Float8MMConfig"}, {"_version", 1},
                              {"_data", {{"emulate", false}, {"use_fast_accum", true}, {"pad_inner_dim", false}}}}},
           {"activation_value_lb", nullptr},
           {"activation_value_ub", nullptr},
           {"kernel_preference", wrapped("KernelPreference", "AUTO")},
           {"set_inductor_config", true},
           {"alg_id", 0}};
      break;
    case Kind::IntxWeightOnly:
      d = {{"weight_dtype", dtype_json("int" + std::to_string(bits))},
           {"granularity", granularity.to_json()},
           {"mapping_type", wrapped("MappingType", mapping_name(mapping))},
           {"scale_dtype", scale_dtype ? dtype_json(std::string(dtype_name(*scale_dtype))) : json(nullptr)},
           {"intx_packing_format", wrapped("IntxPackingFormat", "UNPACKED_TO_INT8")},
           {"intx_choose_qparams_algorithm", wrapped("IntxChooseQParamsAlgorithm", "AFFINE")}};
      break;
  }
  return json{{"_type", type_name()}, {"_version", 2}, {"_data", d}};
}

json Config::to_json() const {
  json j;
  j["quant_method"] = "torchao";
  j["modules_to_not_convert"] = modules_to_not_convert ? json(*modules_to_not_convert) : json(nullptr);
  j["quant_type"] = {{"default", config_dict()}};
  return j;
}

}  // namespace diffq::quant::torchao
