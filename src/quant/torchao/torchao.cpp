#include "quant/torchao/torchao.h"

#include <algorithm>
#include <set>

#include "diffq/error.h"
#include "quant/torchao/affine_int8_weight.h"
#include "quant/torchao/float8_weight.h"
#include "quant/torchao/int4_weight.h"

namespace diffq::quant::torchao {

using nlohmann::json;

namespace {

constexpr const char* kCtx = "torchao.load";

bool in_not_convert(const std::string& name, const Config& cfg) {
  if (!cfg.modules_to_not_convert) return false;
  for (const std::string& key : *cfg.modules_to_not_convert)
    if (name == key || name.find(key + ".") != std::string::npos) return true;
  return false;
}

const json* field(const json& data, const char* key) {
  if (!data.is_object() || !data.contains(key) || data[key].is_null()) return nullptr;
  return &data[key];
}

DType hp_dtype(const json& data) {
  if (const json* d = field(data, "dtype")) {
    const json& v = d->is_object() ? (*d)["_data"] : *d;
    return parse_dtype(v.get<std::string>());
  }
  return DType::bf16;
}

std::optional<Granularity> act_granularity_from(const json& data) {
  const json* a = field(data, "act_quant_kwargs");
  if (!a) return std::nullopt;
  const json& ad = (*a).contains("_data") ? (*a)["_data"] : *a;
  const json* g = field(ad, "granularity");
  return g ? Granularity::parse(*g, "act_quant_kwargs.granularity") : Granularity{Granularity::PerRow, 0, -1};
}

// (bn, bk) from "block_size" or, without metadata, from the scale's shape.
std::pair<int64_t, int64_t> block_from(const json& data, const Tensor& scale, int64_t n, int64_t k,
                                       const std::string& key) {
  if (const json* b = field(data, "block_size")) {
    check(b->is_array() && b->size() == 2, kCtx, key, ": block_size must be [bn, bk], got ", b->dump());
    return {(*b)[0].get<int64_t>(), (*b)[1].get<int64_t>()};
  }
  check(scale.dim() == 2 && scale.shape()[0] > 0 && scale.shape()[1] > 0 && n % scale.shape()[0] == 0 &&
            k % scale.shape()[1] == 0,
        kCtx, key, ": scale shape ", shape_str(scale.shape()), " does not tile the weight [", n, ", ", k, "]");
  return {n / scale.shape()[0], k / scale.shape()[1]};
}

const Tensor& get(const StateDict& sd, const std::string& key) {
  auto it = sd.find(key);
  check(it != sd.end(), kCtx, "missing tensor '", key, "'");
  return it->second;
}

void expect(const Tensor& t, const std::string& key, std::initializer_list<DType> dtypes, const Shape& shape) {
  check(std::find(dtypes.begin(), dtypes.end(), t.dtype()) != dtypes.end(), kCtx, "tensor '", key, "' has dtype ",
        dtype_name(t.dtype()), ", expected ", dtype_name(*dtypes.begin()));
  check(shape.empty() || t.shape() == shape, kCtx, "tensor '", key, "' has shape ", shape_str(t.shape()),
        ", expected ", shape_str(shape));
  check(t.device().is_cpu(), kCtx, "tensor '", key, "' is not on the CPU");
}

std::string class_for(const Config& cfg) {
  switch (cfg.kind) {
    case Kind::Int8WeightOnly:
    case Kind::Int8DynamicActivationInt8Weight: return "Int8Tensor";
    case Kind::Int4WeightOnly: return "Int4Tensor";
    case Kind::Float8WeightOnly:
    case Kind::Float8DynamicActivationFloat8Weight: return "Float8Tensor";
    default: return "IntxUnpackedToInt8Tensor";
  }
}

}  // namespace

bool should_quantize(const std::string& module_name, const Shape& s, const Config& cfg) {
  if (in_not_convert(module_name, cfg)) return false;
  if (s.size() != 2) return false;
  const int64_t n = s[0], k = s[1];
  if (cfg.kind == Kind::Int4WeightOnly && k % cfg.group_size != 0) return false;
  if (cfg.kind == Kind::Float8DynamicActivationFloat8Weight && (n % 16 != 0 || k % 16 != 0)) return false;
  return true;
}

std::shared_ptr<QuantizedWeight> quantize(const Tensor& weight, const Config& cfg) {
  check(weight.dim() == 2 && (weight.dtype() == DType::f32 || weight.dtype() == DType::bf16 || weight.dtype() == DType::f16),
        "torchao.quantize", "weight must be a float32/bfloat16/float16 [N, K] tensor, got ", weight.str());
  const Tensor w = weight.device().is_cpu() ? weight : weight.to(Device::cpu());
  switch (cfg.kind) {
    case Kind::Int8WeightOnly: return AffineInt8Weight::quantize_int8(w, cfg.granularity, std::nullopt);
    case Kind::Int8DynamicActivationInt8Weight:
      return AffineInt8Weight::quantize_int8(w, cfg.granularity, cfg.act_granularity);
    case Kind::Int4WeightOnly: return Int4Weight::quantize(w, cfg.group_size);
    case Kind::Float8WeightOnly: return Float8Weight::quantize(w, cfg.weight_float8, cfg.granularity, std::nullopt);
    case Kind::Float8DynamicActivationFloat8Weight:
      check(cfg.granularity.type != Granularity::PerRow || w.dtype() == DType::bf16, "torchao.quantize",
            "PerRow float8 dynamic quantization only works for bfloat16 weights, got ", dtype_name(w.dtype()));
      return Float8Weight::quantize(w, cfg.weight_float8, cfg.granularity,
                                    Float8ActQuant{cfg.act_float8, cfg.act_granularity});
    case Kind::IntxWeightOnly:
      return AffineInt8Weight::quantize_intx(w, cfg.bits, cfg.granularity, cfg.mapping, cfg.scale_dtype);
  }
  fail("torchao.quantize", "unhandled config");
}

std::shared_ptr<QuantizedWeight> load(const StateDict& sd, const std::string& prefix, const Shape& expected,
                                      const Config& cfg, const Metadata* metadata) {
  check(expected.size() == 2, kCtx, prefix, ".weight: expected shape must be [N, K], got ", shape_str(expected));
  const int64_t n = expected[0], k = expected[1];
  const std::string wkey = prefix + ".weight";
  std::string cls = class_for(cfg);
  json data = json::object();
  if (metadata) {
    auto it = metadata->find(wkey);
    if (it != metadata->end()) {
      json md;
      try {
        md = json::parse(it->second);
      } catch (const std::exception& e) {
        fail(kCtx, "metadata of '", wkey, "' is not JSON: ", e.what());
      }
      check(md.is_object() && md.contains("_type") && md["_type"].is_string(), kCtx, "metadata of '", wkey,
            "' has no _type: ", it->second);
      cls = md["_type"].get<std::string>();
      if (md.contains("_data") && md["_data"].is_object()) data = md["_data"];
    }
  }
  const std::string p = prefix + "._weight_";
  if (cls == "Int8Tensor" || cls == "IntxUnpackedToInt8Tensor") {
    const bool int8 = cls == "Int8Tensor";
    const Tensor& q = get(sd, p + "qdata");
    expect(q, p + "qdata", {DType::i8}, {n, k});
    const Tensor& s = get(sd, p + "scale");
    expect(s, p + "scale", int8 ? std::initializer_list<DType>{DType::f32} : std::initializer_list<DType>{DType::bf16, DType::f32, DType::f16}, {});
    auto [bn, bk] = block_from(data, s, n, k, p + "scale");
    check(bn > 0 && bk > 0 && n % bn == 0 && k % bk == 0, kCtx, wkey, ": block_size [", bn, ", ", bk,
          "] does not tile ", shape_str(expected));
    expect(s, p + "scale", {s.dtype()}, {n / bn, k / bk});
    Tensor zp;
    if (sd.count(p + "zero_point")) {
      zp = get(sd, p + "zero_point");
      expect(zp, p + "zero_point", {DType::i8}, {n / bn, k / bk});
    } else {
      check(int8, kCtx, "missing tensor '", p, "zero_point'");
    }
    if (int8) {
      std::optional<Granularity> act = act_granularity_from(data);
      if (!metadata && cfg.dynamic_activation()) act = cfg.act_granularity;
      return std::make_shared<AffineInt8Weight>(AffineInt8Weight::Flavor::Int8Tensor, q, s, zp, bn, bk, hp_dtype(data), 8, act);
    }
    int bits = cfg.kind == Kind::IntxWeightOnly ? cfg.bits : 8;
    if (const json* t = field(data, "target_dtype")) {
      const std::string name = (t->is_object() ? (*t)["_data"] : *t).get<std::string>();
      check(name.size() == 4 && name.rfind("int", 0) == 0 && name[3] >= '1' && name[3] <= '8', kCtx, wkey,
            ": target_dtype must be int1..int8, got ", name);
      bits = name[3] - '0';
    }
    const DType hp = field(data, "dtype") ? hp_dtype(data) : s.dtype();
    return std::make_shared<AffineInt8Weight>(AffineInt8Weight::Flavor::IntxUnpacked, q, s, zp, bn, bk, hp, bits, std::nullopt);
  }
  if (cls == "Int4Tensor") {
    const Tensor& q = get(sd, p + "qdata");
    check(k % 2 == 0, kCtx, wkey, ": Int4Tensor needs an even in_features, got ", k);
    expect(q, p + "qdata", {DType::i8}, {n, k / 2});
    const Tensor& s = get(sd, p + "scale");
    expect(s, p + "scale", {DType::bf16, DType::f16, DType::f32}, {});
    int64_t g = cfg.kind == Kind::Int4WeightOnly ? cfg.group_size : 0;
    if (const json* b = field(data, "block_size")) g = (*b)[1].get<int64_t>();
    if (g <= 0 && s.dim() == 2 && s.shape()[0] > 0) g = k / s.shape()[0];
    check(g > 0 && k % g == 0, kCtx, wkey, ": group size ", g, " does not divide in_features ", k);
    expect(s, p + "scale", {s.dtype()}, {k / g, n});
    const Tensor& z = get(sd, p + "zero_point");
    expect(z, p + "zero_point", {s.dtype()}, {k / g, n});
    return std::make_shared<Int4Weight>(q, s, z, g, expected);
  }
  if (cls == "Float8Tensor") {
    const Tensor& q = get(sd, p + "qdata");
    expect(q, p + "qdata", {DType::f8_e4m3fn, DType::f8_e5m2}, {n, k});
    const Tensor& s = get(sd, p + "scale");
    expect(s, p + "scale", {DType::f32}, {});
    auto [bn, bk] = block_from(data, s, n, k, p + "scale");
    check(bn > 0 && bk > 0 && n % bn == 0 && k % bk == 0, kCtx, wkey, ": block_size [", bn, ", ", bk,
          "] does not tile ", shape_str(expected));
    expect(s, p + "scale", {DType::f32}, {n / bn, k / bk});
    std::optional<Float8ActQuant> act;
    if (const json* a = field(data, "act_quant_kwargs")) {
      const json& ad = a->contains("_data") ? (*a)["_data"] : *a;
      Float8ActQuant fa;
      if (const json* d = field(ad, "float8_dtype"))
        fa.float8 = parse_dtype((d->is_object() ? (*d)["_data"] : *d).get<std::string>());
      fa.granularity = field(ad, "granularity") ? Granularity::parse(ad["granularity"], "act_quant_kwargs.granularity")
                                                : Granularity{Granularity::PerRow, 0, -1};
      act = fa;
    } else if (!metadata && cfg.kind == Kind::Float8DynamicActivationFloat8Weight) {
      act = Float8ActQuant{cfg.act_float8, cfg.act_granularity};
    }
    return std::make_shared<Float8Weight>(q, s, bn, bk, hp_dtype(data), act);
  }
  fail(kCtx, wkey, ": unsupported torchao tensor class '", cls,
       "' (Int8Tensor, Int4Tensor, Float8Tensor, IntxUnpackedToInt8Tensor)");
}

void save(const QuantizedWeight& w, const std::string& prefix, StateDict& out, Metadata* metadata) {
  const auto* tw = dynamic_cast<const TorchaoWeight*>(&w);
  check(tw != nullptr, "torchao.save", prefix, ".weight: scheme '", w.scheme(), "' is not a torchao weight");
  for (auto& [name, t] : tw->tensor_data()) out[prefix + "._weight_" + name] = t;
  if (metadata) (*metadata)[prefix + ".weight"] = tw->metadata_json().dump();
}

void finish_metadata(const StateDict& sd, Metadata& metadata) {
  std::set<std::string> consumed, names;
  for (auto& [key, value] : metadata) {
    if (key == "tensor_names" || key == "format") continue;
    json md = json::parse(value, nullptr, false);
    if (!md.is_object() || !md.contains("_type") || md["_type"] == "Tensor") continue;
    const auto dot = key.rfind('.');
    check(dot != std::string::npos, "torchao.save", "metadata key '", key, "' is not <module>.<param>");
    const std::string p = key.substr(0, dot) + "._" + key.substr(dot + 1) + "_";
    for (const auto& n : md.value("_tensor_data_names", json::array())) consumed.insert(p + n.get<std::string>());
    names.insert(key);
  }
  for (auto& [key, t] : sd) {
    if (consumed.count(key)) continue;
    metadata[key] = json{{"_type", "Tensor"}}.dump();
    names.insert(key);
  }
  metadata["tensor_names"] = json(std::vector<std::string>(names.begin(), names.end())).dump();
  metadata["format"] = "pt";
}

}  // namespace diffq::quant::torchao
