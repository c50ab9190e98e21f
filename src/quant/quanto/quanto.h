// optimum-quanto weights (Diffusers' QuantoConfig; deprecated in Diffusers >= 0.38 but still loadable),
// bit-exact with optimum-quanto 0.2.7 on the CPU. Every operation runs in the weight's dtype as torch
// does (float32 compute, one rounding per op for bfloat16 / float16):
//  * int8 / float8 (qint8, qfloat8 = float8_e4m3fn): per output row scale = absmax / qmax (127 / 448);
//    data = round(w / scale) clamped to [-128, 127] (int8) or w / scale clamped to +-448 then cast to
//    float8_e4m3fn. Dequantize: scale * data. An all-zero row gives scale 0: int8 codes 0, float8 codes
//    NaN (as quanto).
//  * int4 / int2 (qint4, qint2): affine per group of the flattened rows (group 128, decreased by 32
//    while it does not divide in_features and is above 32; only when in_features > 128; otherwise, or
//    when none divides, one group per row): scale = (max - min) / (2^b - 1), shift = -min, data =
//    clamp(round((w + shift) / scale), 0, 2^b - 1). Dequantize: scale * data - shift. bfloat16 int4
//    weights with group 128 become quanto's TinyGemm tensor on the CPU, whose serialisation rewrites
//    shift as 8 * scale - (min + 8 * scale) in bfloat16 (lossy); diffq reproduces those bytes (quanto
//    needs out_features % 16 == 0 there and fails otherwise; diffq then keeps the plain shift = -min).
//    Packing: along dim 0 of the grouped [G, g] codes, packed row r holds rows r, r + R, r + 2R, ...
//    (R = ceil(G / (8 / b))) at bit offsets 0, b, 2b, ...
//  * file keys (QModuleMixin._save_to_state_dict): "<L>.weight._data" (8-bit) or "<L>.weight._data._data"
//    (packed uint8), "<L>.weight._scale", "<L>.weight._shift" (4/2-bit), "<L>.input_scale" and
//    "<L>.output_scale" (scalar ones in the weight dtype), "<L>.bias" (not written here).
//  * linear: x @ dequantize(x's dtype)^T + bias, float32 accumulation (quanto's own CPU kernels cast x to
//    the weight dtype and return that dtype; diffq keeps x's dtype like every QuantizedWeight).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffq/tensor.h"
#include "io/safetensors.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

enum class QuantoQType : uint8_t { int8, float8, int4, int2 };
std::string_view quanto_qtype_name(QuantoQType q);  // Diffusers' weights_dtype: "int8", "float8", ...
int quanto_bits(QuantoQType q);

// Diffusers' QuantoConfig.
struct QuantoConfig {
  std::string weights_dtype = "int8";
  std::optional<std::vector<std::string>> modules_to_not_convert;

  // Errors (context "quanto.config", Diffusers' message): weights_dtype outside float8/int8/int4/int2;
  // modules_to_not_convert not a list of strings. "quant_method" is accepted.
  static QuantoConfig from_kwargs(const nlohmann::json& kwargs);
  nlohmann::json to_json() const;  // {"modules_to_not_convert", "quant_method": "quanto", "weights_dtype"}
  QuantoQType qtype() const;
  std::string scheme() const;      // "quanto_int8", "quanto_float8", "quanto_int4", "quanto_int2"
  // Diffusers' _replace_with_quanto_layers skips a Linear only when its own (last) name is listed
  // (modules_to_not_convert + the model's _keep_in_fp32_modules); a listed parent does not skip children.
  bool should_quantize(const std::string& module, const std::vector<std::string>& keep_in_fp32 = {}) const;
};

// QModuleMixin's group size for qint4 / qint2 weights of a Linear (nullopt: one group per row).
std::optional<int64_t> quanto_group_size(int64_t out_features, int64_t in_features);

class QuantoWeight : public QuantizedWeight {
 public:
  // data: int8 [O, I] (int8), float8_e4m3fn [O, I] (float8) or the packed uint8 [ceil(G / (8/b)), g]
  // (int4 / int2); scale (and shift) in the weight dtype, [O, 1] / [G, 1] (one element for a
  // per-tensor scale). Throws, naming `name`, on any mismatch.
  QuantoWeight(QuantoQType qt, Shape shape, std::optional<int64_t> group_size, Tensor data, Tensor scale,
               Tensor shift, std::string name = "weight");

  static std::shared_ptr<QuantoWeight> quantize(const Tensor& w, QuantoQType qt, std::string_view name = "weight");
  // The Linear `module`'s tensors as quanto saves them; `shape` is the Linear's [out, in] (quanto takes it
  // from the module too). Errors name the missing or malformed key.
  static std::shared_ptr<QuantoWeight> load(const io::StateDict& sd, const std::string& module, QuantoQType qt,
                                            const Shape& shape);
  void save(io::NamedTensors& out, const std::string& module) const;

  std::string scheme() const override { return "quanto_" + std::string(quanto_qtype_name(qt_)); }
  Shape shape() const override { return shape_; }
  Tensor dequantize(DType dtype) const override;  // quanto's dequantize() (weight dtype), then dtype
  std::vector<Tensor> storage_tensors() const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) of dequantize() as float32, each rounded through `round_to` (f32: none).
  void dequant_rows(int64_t n0, int64_t n1, float* dst, DType round_to = DType::f32) const;

  QuantoQType qtype() const { return qt_; }
  DType dtype() const { return dtype_; }
  std::optional<int64_t> group_size() const { return group_; }
  const Tensor& data() const { return data_; }
  const Tensor& scale() const { return scale_; }
  const Tensor& shift() const { return shift_; }

 private:
  QuantoQType qt_;
  Shape shape_;
  std::optional<int64_t> group_;
  Tensor data_, scale_, shift_;
  DType dtype_;
  std::string name_;
  int64_t groups_ = 0, gcols_ = 0, packed_rows_ = 0;
  std::vector<float> scale_f_, shift_f_;
};

struct QuantoQuantizeOptions {
  DType torch_dtype = DType::f32;  // Diffusers' default torch_dtype with quanto
  // Whether "<module>.weight" belongs to an nn.Linear (only those are quantized). Default: 2-D weights.
  std::function<bool(const std::string& module, const Tensor& weight)> is_linear;
  std::vector<std::string> keep_in_fp32;  // the model's _keep_in_fp32_modules
};

// The tensors save_pretrained writes for a copy of the dense `sd` quantized by Diffusers' QuantoConfig:
// quantized Linears as quanto saves them (plus input_scale / output_scale), every other floating
// tensor cast to torch_dtype (float32 in keep_in_fp32 modules).
io::NamedTensors quanto_quantize_state_dict(const io::StateDict& sd, const QuantoConfig& cfg,
                                            const QuantoQuantizeOptions& opt = {});

// Every quanto Linear weight of a saved state dict by weight key ("<module>.weight"), found by
// "<module>.weight._scale". 4/2-bit weights need the Linear's [out, in] (`shape_of(weight key)`, as
// quanto takes it from the module); 8-bit ones read it from "_data".
std::map<std::string, std::shared_ptr<QuantizedWeight>> quanto_load_state_dict(
    const io::StateDict& sd, const QuantoConfig& cfg, const std::function<Shape(const std::string&)>& shape_of = {});

}  // namespace diffq::quant
