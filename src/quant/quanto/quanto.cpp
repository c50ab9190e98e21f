#include "quant/quanto/quanto.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/tile_linear_plan.h"

namespace diffq::quant {


namespace {

constexpr const char* kCtx = "quanto";

// One torch op's result in dtype d: computed in float32, rounded once.
inline float rd(float v, DType d) {
  if (d == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
  if (d == DType::f16) return f16_to_f32(f32_to_f16(v));
  return v;
}

std::string desc(const Tensor& t) {
  return t.defined() ? shape_str(t.shape()) + " " + std::string(dtype_name(t.dtype())) : std::string("nothing");
}

}  // namespace

std::string_view quanto_qtype_name(QuantoQType q) {
  switch (q) {
    case QuantoQType::int8: return "int8";
    case QuantoQType::float8: return "float8";
    case QuantoQType::int4: return "int4";
    case QuantoQType::int2: return "int2";
  }
  return "?";
}

int quanto_bits(QuantoQType q) {
  return q == QuantoQType::int4 ? 4 : q == QuantoQType::int2 ? 2 : 8;
}

// ---- config ------------------------------------------------------------------------------------------

QuantoConfig QuantoConfig::from_kwargs(const nlohmann::json& kw) {
  check(kw.is_object(), "quanto.config", "QuantoConfig kwargs must be a JSON object, got ", kw.dump());
  QuantoConfig c;
  if (auto it = kw.find("weights_dtype"); it != kw.end()) {
    const std::string v = it->is_string() ? it->get<std::string>() : it->dump();
    check(it->is_string() && (v == "float8" || v == "int8" || v == "int4" || v == "int2"), "quanto.config",
          "Only support weights in ['float8', 'int8', 'int4', 'int2'] but found ", v);
    c.weights_dtype = v;
  }
  if (auto it = kw.find("modules_to_not_convert"); it != kw.end() && !it->is_null()) {
    check(it->is_array(), "quanto.config", "modules_to_not_convert must be a list of strings, got ", it->dump());
    std::vector<std::string> v;
    for (const auto& e : *it) {
      check(e.is_string(), "quanto.config", "modules_to_not_convert must be a list of strings, got ", it->dump());
      v.push_back(e.get<std::string>());
    }
    c.modules_to_not_convert = std::move(v);
  }
  return c;
}

nlohmann::json QuantoConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  j["modules_to_not_convert"] = modules_to_not_convert ? nlohmann::json(*modules_to_not_convert) : nlohmann::json();
  j["quant_method"] = "quanto";
  j["weights_dtype"] = weights_dtype;
  return j;
}

QuantoQType QuantoConfig::qtype() const {
  if (weights_dtype == "int8") return QuantoQType::int8;
  if (weights_dtype == "float8") return QuantoQType::float8;
  if (weights_dtype == "int4") return QuantoQType::int4;
  if (weights_dtype == "int2") return QuantoQType::int2;
  fail("quanto.config", "Only support weights in ['float8', 'int8', 'int4', 'int2'] but found ", weights_dtype);
}

std::string QuantoConfig::scheme() const { return "quanto_" + std::string(quanto_qtype_name(qtype())); }

bool QuantoConfig::should_quantize(const std::string& module, const std::vector<std::string>& keep_in_fp32) const {
  const size_t dot = module.rfind('.');
  const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
  auto listed = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), last) != v.end(); };
  if (modules_to_not_convert && listed(*modules_to_not_convert)) return false;
  return !listed(keep_in_fp32);
}

std::optional<int64_t> quanto_group_size(int64_t out_features, int64_t in_features) {
  (void)out_features;
  int64_t g = 128;
  if (in_features > g) {
    while (in_features % g != 0 && g > 32) g -= 32;
    if (in_features % g == 0) return g;
  }
  return std::nullopt;
}

// ---- weight ------------------------------------------------------------------------------------------

QuantoWeight::QuantoWeight(QuantoQType qt, Shape shape, std::optional<int64_t> group_size, Tensor data, Tensor scale,
                           Tensor shift, std::string name)
    : qt_(qt), shape_(std::move(shape)), group_(group_size), data_(std::move(data)), scale_(std::move(scale)),
      shift_(std::move(shift)), name_(std::move(name)) {
  check(shape_.size() == 2 && shape_[0] > 0 && shape_[1] > 0, kCtx, name_, ": a Linear weight shape must be 2-D, got ",
        shape_str(shape_));
  const int64_t O = shape_[0], I = shape_[1];
  check(scale_.defined() && is_floating(scale_.dtype()) && scale_.dtype() != DType::f8_e4m3fn &&
            scale_.dtype() != DType::f8_e5m2,
        kCtx, name_, "._scale must be a float32/bfloat16/float16 tensor, got ", desc(scale_));
  dtype_ = scale_.dtype();
  const int bits = quanto_bits(qt_);
  if (bits == 8) {
    check(!group_, kCtx, name_, ": 8-bit quanto weights have no groups");
    const DType want = qt_ == QuantoQType::int8 ? DType::i8 : DType::f8_e4m3fn;
    check(data_.defined() && data_.dtype() == want && data_.shape() == shape_, kCtx, name_, "._data must be ",
          dtype_name(want), " ", shape_str(shape_), ", got ", desc(data_));
    check(scale_.numel() == O || scale_.numel() == 1, kCtx, name_, "._scale must be [", O, ", 1], got ", desc(scale_));
    groups_ = O;
    gcols_ = I;
  } else {
    check(O > 1 || group_.has_value(), kCtx, name_, ": a ", quanto_qtype_name(qt_),
          " weight with one output row (a per-column scale in quanto) is not supported");
    const int64_t g = group_ ? *group_ : I;
    check(g > 0 && I % g == 0, kCtx, name_, ": group size ", g, " does not divide in_features ", I);
    groups_ = O * I / g;
    gcols_ = g;
    const int64_t vpi = 8 / bits;
    packed_rows_ = (groups_ + vpi - 1) / vpi;
    check(data_.defined() && data_.dtype() == DType::u8 && data_.shape() == (Shape{packed_rows_, g}), kCtx, name_,
          "._data._data must be uint8 [", packed_rows_, ", ", g, "] for a ", quanto_qtype_name(qt_), " weight of shape ",
          shape_str(shape_), group_ ? " (group " + std::to_string(*group_) + ")" : std::string(" (one group per row)"),
          ", got ", desc(data_));
    check(scale_.numel() == groups_, kCtx, name_, "._scale must be [", groups_, ", 1], got ", desc(scale_));
    check(shift_.defined() && shift_.dtype() == dtype_ && shift_.numel() == groups_, kCtx, name_,
          "._shift must be ", dtype_name(dtype_), " [", groups_, ", 1], got ", desc(shift_));
  }
  check(data_.device().is_cpu() && scale_.device().is_cpu(), kCtx, name_, ": the weight must be on the CPU");
  data_ = data_.contiguous();
  scale_f_ = scale_.to_f32_vector();
  if (scale_f_.size() == 1 && groups_ > 1) scale_f_.assign(size_t(groups_), scale_f_[0]);
  if (shift_.defined()) shift_f_ = shift_.to_f32_vector();
}

std::vector<Tensor> QuantoWeight::storage_tensors() const {
  std::vector<Tensor> v = {data_, scale_};
  if (shift_.defined()) v.push_back(shift_);
  return v;
}

void QuantoWeight::dequant_rows(int64_t n0, int64_t n1, float* dst, DType round_to) const {
  const int64_t I = shape_[1];
  const DType dt = dtype_;
  if (qt_ == QuantoQType::int8) {
    const int8_t* q = data_.data<int8_t>();
    for (int64_t n = n0; n < n1; ++n) {
      const float s = scale_f_[size_t(n)];
      for (int64_t c = 0; c < I; ++c) *dst++ = rd(rd(s * float(q[n * I + c]), dt), round_to);
    }
    return;
  }
  if (qt_ == QuantoQType::float8) {
    const uint8_t* q = data_.data<uint8_t>();
    for (int64_t n = n0; n < n1; ++n) {
      const float s = scale_f_[size_t(n)];
      for (int64_t c = 0; c < I; ++c) *dst++ = rd(rd(s * f8_e4m3fn_to_f32(q[n * I + c]), dt), round_to);
    }
    return;
  }
  const int bits = quanto_bits(qt_);
  const int mask = (1 << bits) - 1;
  const uint8_t* p = data_.data<uint8_t>();
  const int64_t g = gcols_, gpr = I / g;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t k = 0; k < gpr; ++k) {  // group gi = row n's k-th group: codes at packed row gi % R
      const int64_t gi = n * gpr + k;
      const uint8_t* row = p + (gi % packed_rows_) * g;
      const int sh = bits * int(gi / packed_rows_);
      const float s = scale_f_[size_t(gi)], z = shift_f_[size_t(gi)];
      for (int64_t j = 0; j < g; ++j) {
        const float v = rd(s * float((row[j] >> sh) & mask), dt);
        *dst++ = rd(rd(v - z, dt), round_to);
      }
    }
}

Tensor QuantoWeight::dequantize(DType dtype) const {
  Tensor out = Tensor::empty(shape_, DType::f32);
  dequant_rows(0, shape_[0], out.data<float>());
  return out.to(dtype_).to(dtype);
}

std::optional<TileLinearPlan> QuantoWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  const int64_t N = shape_[0], K = shape_[1];
  check(x.dim() >= 1 && x.shape().back() == K, kCtx, name_, ": input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", K);
  const DType dt = x.dtype();
  return TileLinearPlan{x, bias, N, K, [this, dt](int64_t n0, int64_t n1, float* dst) { dequant_rows(n0, n1, dst, dt); }};
}

std::shared_ptr<QuantoWeight> QuantoWeight::quantize(const Tensor& w, QuantoQType qt, std::string_view name) {
  check(w.dim() == 2, kCtx, name, ": a Linear weight must be 2-D, got ", shape_str(w.shape()));
  const DType dt = w.dtype();
  check(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, kCtx, name, ": weight dtype ", dtype_name(dt),
        " is not float32, bfloat16 or float16");
  const int64_t O = w.shape()[0], I = w.shape()[1];
  const std::vector<float> a = w.contiguous().to_f32_vector();  // exact values of dtype dt
  const int bits = quanto_bits(qt);
  if (bits == 8) {
    const float qmax = qt == QuantoQType::int8 ? 127.0f : 448.0f;
    std::vector<float> scale(static_cast<size_t>(O));
    Tensor data = Tensor::empty({O, I}, qt == QuantoQType::int8 ? DType::i8 : DType::f8_e4m3fn);
    core::parallel_for(O, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t n = r0; n < r1; ++n) {
        float am = 0.0f;
        for (int64_t c = 0; c < I; ++c) am = std::max(am, std::fabs(a[size_t(n * I + c)]));
        const float s = rd(am / qmax, dt);
        scale[size_t(n)] = s;
        for (int64_t c = 0; c < I; ++c) {
          const float v = rd(a[size_t(n * I + c)] / s, dt);
          if (qt == QuantoQType::int8) {
            const float r = std::nearbyint(v);
            data.data<int8_t>()[n * I + c] = std::isnan(r) ? 0 : int8_t(std::min(std::max(r, -128.0f), 127.0f));
          } else {
            // A NaN (0 / 0 of an all-zero row) leaves torch's vectorised clamp as the all-ones NaN, so its
            // float8 code is 0xff whatever the dtype.
            data.data<uint8_t>()[n * I + c] =
                std::isnan(v) ? uint8_t(0xff) : f32_to_f8_e4m3fn(std::min(std::max(v, -448.0f), 448.0f));
          }
        }
      }
    });
    Tensor st = Tensor::from_vector(scale, {O, 1}, dt);
    return std::make_shared<QuantoWeight>(qt, w.shape(), std::nullopt, data, st, Tensor(), std::string(name));
  }
  check(O > 1, kCtx, name, ": ", quanto_qtype_name(qt), " quantization of a weight with one output row is not supported");
  const auto group = quanto_group_size(O, I);
  const int64_t g = group ? *group : I;
  const int64_t G = O * I / g;
  const float qrange = float((1 << bits) - 1);
  std::vector<float> scale(static_cast<size_t>(G)), shift(static_cast<size_t>(G));
  std::vector<uint8_t> codes(static_cast<size_t>(G * g));
  core::parallel_for(G, 16, [&](int64_t g0, int64_t g1) {
    for (int64_t gi = g0; gi < g1; ++gi) {
      const float* v = a.data() + gi * g;  // grouped rows are consecutive runs of the flattened weight
      float mn = v[0], mx = v[0];
      for (int64_t j = 1; j < g; ++j) {
        mn = std::min(mn, v[j]);
        mx = std::max(mx, v[j]);
      }
      const float s = rd(rd(mx - mn, dt) / qrange, dt);
      const float sh = -mn;
      scale[size_t(gi)] = s;
      shift[size_t(gi)] = sh;
      for (int64_t j = 0; j < g; ++j) {
        const float r = std::nearbyint(rd(rd(v[j] + sh, dt) / s, dt));
        codes[size_t(gi * g + j)] = std::isnan(r) ? 0 : uint8_t(std::min(std::max(r, 0.0f), qrange));
      }
    }
  });
  // bfloat16 int4 with group 128 is quanto's TinyGemm tensor on the CPU: its saved shift went through
  // shift' = min + 8 * scale and back (8 * scale - shift'), both rounded to bfloat16. (tinygemm needs
  // out_features % 16 == 0; quanto fails on other shapes, diffq keeps the plain shift for them.)
  if (qt == QuantoQType::int4 && dt == DType::bf16 && g == 128 && group && O % 16 == 0) {
    for (int64_t gi = 0; gi < G; ++gi) {
      const float half = rd(8.0f * scale[size_t(gi)], dt);
      const float tg = rd(-shift[size_t(gi)] + half, dt);
      shift[size_t(gi)] = rd(half - tg, dt);
    }
  }
  const int64_t vpi = 8 / bits, R = (G + vpi - 1) / vpi;
  Tensor packed = Tensor::zeros({R, g}, DType::u8);
  uint8_t* p = packed.data<uint8_t>();
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t j = 0; j < g; ++j) p[(gi % R) * g + j] |= uint8_t(codes[size_t(gi * g + j)] << (bits * (gi / R)));
  return std::make_shared<QuantoWeight>(qt, w.shape(), group, packed, Tensor::from_vector(scale, {G, 1}, dt),
                                        Tensor::from_vector(shift, {G, 1}, dt), std::string(name));
}

std::shared_ptr<QuantoWeight> QuantoWeight::load(const io::StateDict& sd, const std::string& module, QuantoQType qt,
                                                 const Shape& shape) {
  check(shape.size() == 2, kCtx, module, ": the Linear shape must be 2-D, got ", shape_str(shape));
  const std::string wk = module + ".weight";
  auto get = [&](const std::string& key) -> Tensor {
    const auto it = sd.find(key);
    check(it != sd.end(), kCtx, "the ", quanto_qtype_name(qt), " weight ", wk, " has no '", key, "'");
    check(it->second.device().is_cpu(), kCtx, key, " must be on the CPU");
    return it->second;
  };
  const bool eight = quanto_bits(qt) == 8;
  const Tensor data = get(eight ? wk + "._data" : wk + "._data._data");
  const Tensor scale = get(wk + "._scale");
  const Tensor shift = eight ? Tensor() : get(wk + "._shift");
  const auto group = eight ? std::nullopt : quanto_group_size(shape[0], shape[1]);
  for (const char* s : {".input_scale", ".output_scale"}) {
    const auto it = sd.find(module + s);
    if (it != sd.end())
      check(it->second.numel() == 1, kCtx, module + s, " must be a scalar, got ", shape_str(it->second.shape()));
  }
  return std::make_shared<QuantoWeight>(qt, shape, group, data, scale, shift, wk);
}

void QuantoWeight::save(io::NamedTensors& out, const std::string& module) const {
  const std::string wk = module + ".weight";
  out.emplace_back(quanto_bits(qt_) == 8 ? wk + "._data" : wk + "._data._data", data_);
  out.emplace_back(wk + "._scale", scale_);
  if (shift_.defined()) out.emplace_back(wk + "._shift", shift_);
  out.emplace_back(module + ".input_scale", Tensor::full({}, 1.0, dtype_));
  out.emplace_back(module + ".output_scale", Tensor::full({}, 1.0, dtype_));
}

// ---- state dicts --------------------------------------------------------------------------------------

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

io::NamedTensors quanto_quantize_state_dict(const io::StateDict& sd, const QuantoConfig& cfg,
                                            const QuantoQuantizeOptions& opt) {
  const QuantoQType qt = cfg.qtype();
  io::NamedTensors out;
  for (const auto& [key, t] : sd) {
    if (ends_with(key, ".weight")) {
      const std::string module = key.substr(0, key.size() - 7);
      const bool linear = opt.is_linear ? opt.is_linear(module, t) : t.dim() == 2;
      if (linear && cfg.should_quantize(module, opt.keep_in_fp32)) {
        QuantoWeight::quantize(t.to(opt.torch_dtype), qt, key)->save(out, module);
        continue;
      }
    }
    if (is_floating(t.dtype())) {
      // Diffusers keeps a parameter in float32 when one of its dotted components is a keep entry.
      bool fp32 = false;
      for (size_t start = 0; start <= key.size() && !fp32;) {
        const size_t dot = std::min(key.find('.', start), key.size());
        fp32 = std::find(opt.keep_in_fp32.begin(), opt.keep_in_fp32.end(), key.substr(start, dot - start)) !=
               opt.keep_in_fp32.end();
        start = dot + 1;
      }
      out.emplace_back(key, t.to(fp32 ? DType::f32 : opt.torch_dtype));
    } else {
      out.emplace_back(key, t);
    }
  }
  return out;
}

std::map<std::string, std::shared_ptr<QuantizedWeight>> quanto_load_state_dict(
    const io::StateDict& sd, const QuantoConfig& cfg, const std::function<Shape(const std::string&)>& shape_of) {
  const QuantoQType qt = cfg.qtype();
  std::map<std::string, std::shared_ptr<QuantizedWeight>> out;
  for (const auto& [key, t] : sd) {
    if (!ends_with(key, ".weight._scale")) continue;
    const std::string wk = key.substr(0, key.size() - 7), module = wk.substr(0, wk.size() - 7);
    Shape shape;
    if (quanto_bits(qt) == 8) {
      const auto d = sd.find(wk + "._data");
      check(d != sd.end(), kCtx, "the ", quanto_qtype_name(qt), " weight ", wk, " has no '", wk, "._data'");
      shape = d->second.shape();
    } else {
      check(bool(shape_of), kCtx, wk, ": the Linear's shape is needed to read a ", quanto_qtype_name(qt), " weight");
      shape = shape_of(wk);
    }
    out[wk] = QuantoWeight::load(sd, module, qt, shape);
  }
  return out;
}

}  // namespace diffq::quant
