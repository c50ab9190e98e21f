#include "quant/nunchaku/nunchaku.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/nunchaku/nunchaku_layout.h"

namespace diffq::quant::nunchaku {

namespace {

constexpr const char* kCfg = "nunchaku.config";
constexpr const char* kCtx = "nunchaku";

// ---- config ----
NunchakuSection parse_section(const nlohmann::json& raw, const std::string& op, const std::string& source) {
  check(raw.is_object(), kCfg, source, ": Nunchaku compact config section '", op, "' must be a JSON object.");
  auto need = [&](const char* key) -> const nlohmann::json& {
    check(raw.contains(key), kCfg, source, ": Nunchaku compact config section '", op, "' is missing required field '",
          key, "'.");
    return raw.at(key);
  };
  NunchakuSection s;
  const auto& p = need("precision");
  check(p.is_string(), kCfg, source, ": Nunchaku compact config section '", op, "' field 'precision' must be str.");
  const auto& g = need("group_size");
  check(g.is_number_integer(), kCfg, source, ": Nunchaku compact config section '", op,
        "' field 'group_size' must be int.");
  const auto& t = need("targets");
  check(t.is_array(), kCfg, source, ": Nunchaku compact config section '", op, "' field 'targets' must be list.");
  s.precision = p.get<std::string>();
  s.group_size = g.get<int64_t>();
  check(s.precision == "int4" || s.precision == "nvfp4", kCfg, source, ": Unsupported Nunchaku precision '",
        s.precision, "' for '", op, "'.");
  check(s.group_size > 0, kCfg, source, ": Nunchaku compact config section '", op, "' must have positive group_size.");
  check(!t.empty(), kCfg, source, ": Nunchaku compact config section '", op, "' must contain at least one target.");
  for (const auto& e : t) {
    check(e.is_string(), kCfg, source, ": Nunchaku compact config section '", op, "' targets must be strings.");
    s.targets.push_back(e.get<std::string>());
  }
  if (op == "svdq_w4a4") {
    const auto& r = need("rank");
    check(r.is_number_integer(), kCfg, source, ": Nunchaku compact config section '", op, "' field 'rank' must be int.");
    s.rank = r.get<int64_t>();
    check(s.rank >= 0, kCfg, source, ": Nunchaku compact config section '", op, "' must have non-negative rank.");
    const int64_t expected = s.precision == "nvfp4" ? 16 : 64;
    check(s.group_size == expected, kCfg, source, ": Nunchaku SVDQ config with precision='", s.precision,
          "' requires group_size=", expected, ", got ", s.group_size, ".");
  } else {
    check(s.precision == "int4", kCfg, source, ": Nunchaku AWQ target requires precision='int4'.");
    check(s.group_size == 64, kCfg, source, ": awq_w4a16 group_size ", s.group_size,
          " is not supported (the nunchaku AWQ layout is group 64)");
  }
  check(s.precision == "int4", kCfg, source, ": ", op,
        " precision 'nvfp4' (FP4 E2M1 weights and activations with FP8 micro scales) is not supported by diffq yet; "
        "int4 is");
  return s;
}

}  // namespace

NunchakuLiteConfig NunchakuLiteConfig::from_json(const nlohmann::json& qc, const std::string& source) {
  check(qc.is_object(), kCfg, source, ": quantization_config must be a JSON object");
  NunchakuLiteConfig c;
  if (auto it = qc.find("compute_dtype"); it != qc.end() && !it->is_null()) {
    check(it->is_string(), kCfg, source, ": Nunchaku compute_dtype must be a string or a torch.dtype.");
    c.compute_dtype = it->get<std::string>();
    if (c.compute_dtype.rfind("torch.", 0) == 0) c.compute_dtype = c.compute_dtype.substr(6);
    check(c.compute_dtype == "bfloat16" || c.compute_dtype == "float16" || c.compute_dtype == "float32", kCfg, source,
          ": Unsupported Nunchaku compute dtype: '", c.compute_dtype, "'.");
  }
  for (const char* op : {"svdq_w4a4", "awq_w4a16"}) {
    auto it = qc.find(op);
    if (it == qc.end() || it->is_null()) continue;
    (std::string(op) == "svdq_w4a4" ? c.svdq_w4a4 : c.awq_w4a16) = parse_section(*it, op, source);
  }
  check(c.svdq_w4a4 || c.awq_w4a16, kCfg, source,
        ": Nunchaku compact quantization config must include `svdq_w4a4.targets` or `awq_w4a16.targets`.");
  return c;
}

nlohmann::json NunchakuLiteConfig::to_json() const {
  nlohmann::json j = {{"quant_method", "nunchaku_lite"}, {"compute_dtype", compute_dtype}};
  auto sec = [](const NunchakuSection& s, bool rank) {
    nlohmann::json o = {{"precision", s.precision}, {"group_size", s.group_size}, {"targets", s.targets}};
    if (rank) o["rank"] = s.rank;
    return o;
  };
  if (svdq_w4a4) j["svdq_w4a4"] = sec(*svdq_w4a4, true);
  if (awq_w4a16) j["awq_w4a16"] = sec(*awq_w4a16, false);
  return j;
}

std::string NunchakuLiteConfig::scheme() const {
  std::string s;
  if (svdq_w4a4) s += "svdq_w4a4_" + svdq_w4a4->precision + "_r" + std::to_string(svdq_w4a4->rank);
  if (awq_w4a16) s += (s.empty() ? "" : "+") + std::string("awq_w4a16_") + awq_w4a16->precision;
  return s;
}

NunchakuLiteConfig::Kind NunchakuLiteConfig::kind_of(const std::string& module) const {
  auto in = [&](const std::optional<NunchakuSection>& s) {
    return s && std::find(s->targets.begin(), s->targets.end(), module) != s->targets.end();
  };
  if (in(svdq_w4a4)) return Kind::svdq;
  if (in(awq_w4a16)) return Kind::awq;
  return Kind::none;
}

// ---- SVDQ W4A4 ----

namespace {

const Tensor& need(const io::StateDict& sd, const std::string& key, std::vector<std::string>& consumed) {
  auto it = sd.find(key);
  check(it != sd.end(), kCtx, "the Nunchaku checkpoint has no '", key, "'");
  consumed.push_back(key);
  return it->second;
}

void expect_shape(const Tensor& t, const std::string& key, const Shape& want, const char* what) {
  check(t.shape() == want, kCtx, "'", key, "' has shape ", shape_str(t.shape()), ", expected ", shape_str(want), " (",
        what, ")");
}

void expect_float(const Tensor& t, const std::string& key) {
  check(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, kCtx, "'", key,
        "' has dtype ", dtype_name(t.dtype()), ", expected a float (bfloat16, float16 or float32)");
}

}  // namespace

std::shared_ptr<SvdqW4A4Weight> SvdqW4A4Weight::load(const io::StateDict& sd, const std::string& module,
                                                     const Shape& shape, int64_t rank, int64_t group_size,
                                                     std::vector<std::string>& consumed) {
  check(shape.size() == 2, kCtx, module, ": expected a Linear weight [out, in], got ", shape_str(shape));
  const int64_t n = shape[0], k = shape[1];
  check(group_size == 64, kCtx, module, ": svdq_w4a4 int4 needs group_size 64, got ", group_size);
  check(k % 64 == 0, kCtx, module, ": in_features ", k, " is not a multiple of the group size 64");
  const std::string p = module + ".";
  const Tensor& qw = need(sd, p + "qweight", consumed);
  const Tensor& ws = need(sd, p + "wscales", consumed);
  const Tensor& sm = need(sd, p + "smooth_factor", consumed);
  const Tensor& dn = need(sd, p + "proj_down", consumed);
  const Tensor& up = need(sd, p + "proj_up", consumed);
  check(qw.dtype() == DType::i8 || qw.dtype() == DType::u8, kCtx, "'", p, "qweight' has dtype ", dtype_name(qw.dtype()),
        ", expected int8 (packed int4 codes)");
  expect_shape(qw, p + "qweight", {n, k / 2}, "[out_features, in_features / 2]");
  const int64_t g = k / 64;
  expect_float(ws, p + "wscales");
  expect_shape(ws, p + "wscales", {g, n}, "[in_features / 64, out_features]");
  expect_float(sm, p + "smooth_factor");
  expect_shape(sm, p + "smooth_factor", {k}, "[in_features]");
  expect_float(dn, p + "proj_down");
  expect_shape(dn, p + "proj_down", {k, rank}, "[in_features, rank]");
  expect_float(up, p + "proj_up");
  expect_shape(up, p + "proj_up", {n, rank}, "[out_features, rank]");
  const bool packed = svdq_packed_layout(n, k, rank);

  Tensor codes = Tensor::empty({n, k}, DType::i8);
  const Tensor qc = qw.contiguous();
  svdq_decode_codes(static_cast<const uint8_t*>(qc.data_ptr()), n, k, packed, codes.data<int8_t>());
  const auto wsv = ws.to_f32_vector(), smv = sm.to_f32_vector(), dnv = dn.to_f32_vector(), upv = up.to_f32_vector();
  Tensor wsl = Tensor::empty({g, n}, DType::f32), sml = Tensor::empty({k}, DType::f32);
  Tensor dnl = Tensor::empty({rank, k}, DType::f32), upl = Tensor::empty({n, rank}, DType::f32);
  for (int64_t gi = 0; gi < g; ++gi)
    for (int64_t j = 0; j < n; ++j) wsl.data<float>()[gi * n + j] = wsv[size_t(svdq_scale_index(gi, j, g, n, packed))];
  for (int64_t j = 0; j < k; ++j) sml.data<float>()[j] = smv[size_t(svdq_scale_index(0, j, 1, k, packed))];
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t rr = 0; rr < rank; ++rr)
      dnl.data<float>()[rr * k + kk] = dnv[size_t(svdq_down_index(kk, rr, k, rank, packed))];
  for (int64_t nn = 0; nn < n; ++nn)
    for (int64_t rr = 0; rr < rank; ++rr)
      upl.data<float>()[nn * rank + rr] = upv[size_t(svdq_up_index(nn, rr, n, rank, packed))];
  return std::make_shared<SvdqW4A4Weight>(codes, wsl, sml, dnl, upl, packed, module);
}

SvdqW4A4Weight::SvdqW4A4Weight(Tensor codes, Tensor wscales, Tensor smooth, Tensor down, Tensor up, bool packed,
                               std::string name)
    : codes_(std::move(codes)), wscales_(std::move(wscales)), smooth_(std::move(smooth)), down_(std::move(down)),
      up_(std::move(up)), packed_(packed), name_(std::move(name)) {
  check(codes_.dim() == 2 && codes_.dtype() == DType::i8, kCtx, name_, ": codes must be int8 [N, K]");
  n_ = codes_.shape()[0], k_ = codes_.shape()[1], g_ = k_ / 64, r_ = up_.shape()[1];
  check(wscales_.shape() == Shape{g_, n_} && smooth_.shape() == Shape{k_} && down_.shape() == Shape{r_, k_} &&
            up_.shape() == Shape{n_, r_},
        kCtx, name_, ": inconsistent logical tensors");
}

Tensor SvdqW4A4Weight::dequantize_residual() const {
  Tensor w = Tensor::empty({n_, k_}, DType::f32);
  const int8_t* c = codes_.data<int8_t>();
  const float* ws = wscales_.data<float>();
  float* o = w.data<float>();
  for (int64_t i = 0; i < n_; ++i)
    for (int64_t j = 0; j < k_; ++j) o[i * k_ + j] = float(c[i * k_ + j]) * ws[(j / 64) * n_ + i];
  return w;
}

Tensor SvdqW4A4Weight::dequantize(DType dtype) const {
  Tensor w = dequantize_residual();
  float* o = w.data<float>();
  const float* sm = smooth_.data<float>();
  const float* dn = down_.data<float>();
  const float* up = up_.data<float>();
  for (int64_t i = 0; i < n_; ++i)
    for (int64_t j = 0; j < k_; ++j) {
      float lr = 0;
      for (int64_t r = 0; r < r_; ++r) lr += up[i * r_ + r] * dn[r * k_ + j];
      o[i * k_ + j] = o[i * k_ + j] / sm[j] + lr;
    }
  return dtype == DType::f32 ? w : w.to(dtype);
}

std::vector<float> SvdqW4A4Weight::logical_bias(const Tensor& bias) const {
  std::vector<float> b(size_t(n_), 0.0f);
  if (!bias.defined()) return b;
  check(bias.numel() == n_, kCtx, name_, ": bias has ", bias.numel(), " elements, expected ", n_);
  const auto v = bias.to_f32_vector();
  for (int64_t j = 0; j < n_; ++j) b[size_t(j)] = v[size_t(svdq_scale_index(0, j, 1, n_, packed_))];
  return b;
}

void SvdqW4A4Weight::quantize_activations(const float* x, int64_t m, int8_t* q, float* ascale) const {
  const float* sm = smooth_.data<float>();
  const float inv7 = 1.0f / 7.0f;
  core::parallel_for(m, 4, [&](int64_t a, int64_t b) {
    std::vector<float> xs(static_cast<size_t>(k_));
    for (int64_t t = a; t < b; ++t) {
      for (int64_t j = 0; j < k_; ++j) xs[size_t(j)] = x[t * k_ + j] / sm[j];
      for (int64_t gi = 0; gi < g_; ++gi) {
        float amax = 0;
        for (int64_t j = gi * 64; j < gi * 64 + 64; ++j) amax = std::max(amax, std::fabs(xs[size_t(j)]));
        const float s = amax * inv7;
        ascale[t * g_ + gi] = s;
        const float rs = s == 0.0f ? 0.0f : 1.0f / s;
        for (int64_t j = gi * 64; j < gi * 64 + 64; ++j) {
          const float v = std::nearbyint(xs[size_t(j)] * rs);  // round half to even (default rounding mode)
          q[t * k_ + j] = int8_t(std::isnan(v) ? 0.0f : std::clamp(v, -8.0f, 7.0f));
        }
      }
    }
  });
}

void SvdqW4A4Weight::check_input(const Tensor& x) const {
  check(x.dim() >= 1 && x.shape().back() == k_, kCtx, name_, ": input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", in_features is ", k_);
}

Tensor SvdqW4A4Weight::linear_reference(const Tensor& x, const Tensor& bias) const {
  check_input(x);
  const auto xv = x.to_f32_vector();
  const int64_t m = x.numel() / k_;
  std::vector<int8_t> q(size_t(m * k_));
  std::vector<float> as(size_t(m * g_));
  quantize_activations(xv.data(), m, q.data(), as.data());
  const auto b = logical_bias(bias);
  const int8_t* c = codes_.data<int8_t>();
  const float* ws = wscales_.data<float>();
  const float* dn = down_.data<float>();
  const float* up = up_.data<float>();
  Shape os = x.shape();
  os.back() = n_;
  Tensor y = Tensor::empty(os, DType::f32);
  float* yo = y.data<float>();
  std::vector<float> la(static_cast<size_t>(r_));
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < r_; ++r) {
      float s = 0;
      for (int64_t j = 0; j < k_; ++j) s += xv[size_t(t * k_ + j)] * dn[r * k_ + j];
      la[size_t(r)] = s;
    }
    for (int64_t i = 0; i < n_; ++i) {
      float acc = 0;
      for (int64_t gi = 0; gi < g_; ++gi) {
        int32_t d = 0;
        for (int64_t j = gi * 64; j < gi * 64 + 64; ++j) d += int32_t(q[size_t(t * k_ + j)]) * int32_t(c[i * k_ + j]);
        acc += float(d) * as[size_t(t * g_ + gi)] * ws[gi * n_ + i];
      }
      float lr = 0;
      for (int64_t r = 0; r < r_; ++r) lr += la[size_t(r)] * up[i * r_ + r];
      yo[t * n_ + i] = acc + lr + b[size_t(i)];
    }
  }
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

// ---- AWQ W4A16 ----

std::shared_ptr<AwqW4A16Weight> AwqW4A16Weight::load(const io::StateDict& sd, const std::string& module,
                                                     const Shape& shape, int64_t group_size,
                                                     std::vector<std::string>& consumed) {
  check(shape.size() == 2, kCtx, module, ": expected a Linear weight [out, in], got ", shape_str(shape));
  const int64_t n = shape[0], k = shape[1];
  check(group_size == 64, kCtx, module, ": awq_w4a16 needs group_size 64, got ", group_size);
  check(k % 64 == 0 && n % 4 == 0, kCtx, module, ": awq_w4a16 needs in_features % 64 == 0 and out_features % 4 == 0, got [",
        n, ", ", k, "]");
  const std::string p = module + ".";
  const Tensor& qw = need(sd, p + "qweight", consumed);
  const Tensor& ws = need(sd, p + "wscales", consumed);
  const Tensor& wz = need(sd, p + "wzeros", consumed);
  check(qw.dtype() == DType::i32, kCtx, "'", p, "qweight' has dtype ", dtype_name(qw.dtype()),
        ", expected int32 (eight int4 codes per word)");
  expect_shape(qw, p + "qweight", {n / 4, k / 2}, "[out_features / 4, in_features / 2]");
  expect_float(ws, p + "wscales");
  expect_shape(ws, p + "wscales", {k / 64, n}, "[in_features / 64, out_features]");
  expect_float(wz, p + "wzeros");
  expect_shape(wz, p + "wzeros", {k / 64, n}, "[in_features / 64, out_features]");
  return std::make_shared<AwqW4A16Weight>(qw.contiguous(), ws.to(DType::f32).contiguous(),
                                          wz.to(DType::f32).contiguous(), Shape{n, k}, module);
}

AwqW4A16Weight::AwqW4A16Weight(Tensor qweight, Tensor wscales, Tensor wzeros, Shape shape, std::string name)
    : qweight_(std::move(qweight)), wscales_(std::move(wscales)), wzeros_(std::move(wzeros)), n_(shape[0]),
      k_(shape[1]), name_(std::move(name)) {}

Tensor AwqW4A16Weight::dequantize(DType dtype) const {
  Tensor w = Tensor::empty({n_, k_}, DType::f32);
  const int32_t* q = qweight_.data<int32_t>();
  const float* s = wscales_.data<float>();
  const float* z = wzeros_.data<float>();
  float* o = w.data<float>();
  for (int64_t i = 0; i < n_; ++i)
    for (int64_t j = 0; j < k_; ++j) {
      const float prod = float(awq_code(q, k_, i, j)) * s[(j / 64) * n_ + i];
      o[i * k_ + j] = prod + z[(j / 64) * n_ + i];
    }
  return dtype == DType::f32 ? w : w.to(dtype);
}

}  // namespace diffq::quant::nunchaku
