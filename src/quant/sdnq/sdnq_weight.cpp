#include "quant/sdnq/sdnq_weight.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::quant::sdnq {

namespace {
constexpr const char* kCtx = "sdnq";

float f8_to_f32(uint8_t v, DType f8) { return f8 == DType::f8_e5m2 ? f8_e5m2_to_f32(v) : f8_e4m3fn_to_f32(v); }
uint8_t f32_to_f8(float v, DType f8) { return f8 == DType::f8_e5m2 ? f32_to_f8_e5m2(v) : f32_to_f8_e4m3fn(v); }

int64_t packed_bytes(int64_t numel, const SdnqDtype& d) { return (numel * d.bits + 7) / 8; }
}  // namespace

int64_t sdnq_groups_per_row(int64_t group_size, int64_t K, const SdnqDtype& d) {
  if (group_size == -2) return 0;
  if (group_size == 0) group_size = int64_t(1) << (1 + d.bits + 1);  // linear layers: 2^(2 + bits)
  if (group_size < 0 || group_size >= K) return 1;
  int64_t groups = K / group_size;
  while (groups * group_size != K) {  // the library's search for a divisor, downwards
    --groups;
    if (groups <= 1) return 1;
    group_size = K / groups;
  }
  return groups;
}

SdnqWeight::SdnqWeight(const SdnqDtype& dtype, Tensor weight, Tensor scale, Tensor zero_point, Shape shape)
    : d_(dtype), weight_(weight.contiguous()), scale_(scale.contiguous()),
      zero_(zero_point.defined() ? zero_point.contiguous() : Tensor()) {
  check(shape.size() == 2 && shape[0] > 0 && shape[1] > 0, kCtx, "weight shape ", shape_str(shape), " is not [N, K]");
  n_ = shape[0];
  k_ = shape[1];
  const int64_t numel = n_ * k_;
  if (d_.is_packed)
    check(weight_.dtype() == DType::u8 && weight_.numel() == packed_bytes(numel, d_), kCtx, d_.name,
          ": packed weight must be uint8 with ", packed_bytes(numel, d_), " bytes for ", shape_str(shape), ", got ",
          weight_.str());
  else
    check(weight_.dtype() == d_.storage && weight_.numel() == numel, kCtx, d_.name, ": weight must be ",
          dtype_name(d_.storage), " with ", numel, " elements for ", shape_str(shape), ", got ", weight_.str());
  check(is_floating(scale_.dtype()) && scale_.dtype() != DType::f8_e4m3fn && scale_.dtype() != DType::f8_e5m2, kCtx,
        "scale must be float32, bfloat16 or float16, got ", scale_.str());
  const Shape& ss = scale_.shape();
  if (scale_.numel() == 1 && n_ > 1) {
    groups_ = 0;  // tensor-wise
  } else {
    check(ss.size() >= 2 && ss[0] == n_ && ss.back() == 1 && scale_.numel() >= n_ && scale_.numel() % n_ == 0, kCtx,
          "scale ", scale_.str(), " is not [", n_, ", 1] or [", n_, ", G, 1]");
    groups_ = scale_.numel() / n_;
    check(k_ % groups_ == 0, kCtx, "scale ", scale_.str(), ": ", groups_, " groups do not divide in_features ", k_);
  }
  if (d_.is_unsigned) {
    check(zero_.defined(), kCtx, d_.name, " needs a zero_point");
    check(zero_.dtype() == scale_.dtype() && zero_.shape() == scale_.shape(), kCtx, "zero_point must be ",
          dtype_name(scale_.dtype()), " ", shape_str(scale_.shape()), " like scale, got ", zero_.str());
    z_ = zero_.to_f32_vector();
  } else {
    check(!zero_.defined(), kCtx, d_.name, " is symmetric and has no zero_point");
  }
  s_ = scale_.to_f32_vector();
}

float SdnqWeight::code(int64_t i) const {
  if (d_.is_packed) return float(sdnq_unpack_code(weight_.data<uint8_t>(), i, d_));
  switch (d_.storage) {
    case DType::i8: return float(weight_.data<int8_t>()[i]);
    case DType::u8: return float(weight_.data<uint8_t>()[i]);
    default: return f8_to_f32(static_cast<const uint8_t*>(weight_.data_ptr())[i], d_.storage);
  }
}

void SdnqWeight::dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const {
  const DType sdt = scale_.dtype();
  const int64_t g = groups_ ? k_ / groups_ : k_;
  for (int64_t r = n0; r < n1; ++r) {
    float* d = dst + (r - n0) * k_;
    for (int64_t c = 0; c < k_; ++c) {
      const size_t si = groups_ ? size_t(r * groups_ + c / g) : 0;
      const float q = code(r * k_ + c);  // exact in every scale dtype (|q| <= 255 or a float8 value)
      // signed: q * scale; unsigned: torch.addcmul(zero_point, q, scale) as sdnq runs it on the CPU, through
      // torch.compile (Inductor): the product and the sum rounded separately (eager addcmul would fuse them)
      float v = round_through(sdt, q * s_[si]);
      if (d_.is_unsigned) v = round_through(sdt, z_[si] + v);
      d[c] = round_through(out, v);
    }
  }
}

Tensor SdnqWeight::dequantize(DType dtype) const {
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, kCtx, "dequantize to ",
        dtype_name(dtype), ": not float32, bfloat16 or float16");
  Tensor f = Tensor::empty({n_, k_}, DType::f32);
  float* p = f.data<float>();
  core::parallel_for(n_, 16, [&](int64_t a, int64_t b) { dequant_rows(a, b, dtype, p + a * k_); });
  return dtype == DType::f32 ? f : f.to(dtype);
}

std::vector<Tensor> SdnqWeight::storage_tensors() const {
  std::vector<Tensor> v{weight_, scale_};
  if (zero_.defined()) v.push_back(zero_);
  return v;
}

std::optional<TileLinearPlan> SdnqWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  // sdnq's forward: F.linear(x, dequantize(result dtype = the compute dtype), bias)
  const DType out = x.dtype();
  return TileLinearPlan{x, bias, n_, k_, [this, out](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, out, dst); }};
}

std::shared_ptr<SdnqWeight> SdnqWeight::quantize(const Tensor& w, const SdnqDtype& d, int64_t group_size,
                                                 DType scale_dtype) {
  check(w.dim() == 2 && is_floating(w.dtype()), kCtx, "weight must be a float [N, K] tensor, got ", w.str());
  const int64_t n = w.shape()[0], k = w.shape()[1];
  const int64_t groups = sdnq_groups_per_row(group_size, k, d);
  const int64_t g = groups ? k / groups : n * k;   // elements per group
  const int64_t ngroups = groups ? n * groups : 1;  // groups in the tensor (row-major, contiguous)
  const std::vector<float> wf = w.to_f32_vector();  // the library quantizes in float32
  std::vector<float> sv(static_cast<size_t>(ngroups)), zv(d.is_unsigned ? static_cast<size_t>(ngroups) : 0);
  std::vector<int32_t> codes(size_t(n * k));
  std::vector<uint8_t> f8codes(d.is_integer ? 0 : size_t(n * k));
  const float range = d.is_unsigned ? d.max - d.min : d.max;
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const float* x = wf.data() + gi * g;
    float mn = x[0], mx = x[0], amax = std::fabs(x[0]);
    for (int64_t i = 1; i < g; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    // scale (and zero point) in float32, then cast to the scale dtype when it is not float32
    float scale = d.is_unsigned ? (mx - mn) / range : amax / range;
    float zp = mn;
    scale = round_through(scale_dtype, scale);
    zp = round_through(scale_dtype, zp);
    sv[size_t(gi)] = scale;
    if (d.is_unsigned) zv[size_t(gi)] = zp;
    for (int64_t i = 0; i < g; ++i) {
      const float v = d.is_unsigned ? (x[i] - zp) / scale : x[i] / scale;
      const size_t o = size_t(gi * g + i);
      if (d.is_integer) {
        float r = std::nearbyint(v);
        r = std::min(std::max(r, d.min), d.max);
        codes[o] = std::isnan(r) ? 0 : int32_t(r);
      } else {
        float r = std::isnan(v) ? 0.0f : v;  // nan_to_num (+-inf -> +-float max, then clamped)
        r = std::min(std::max(r, d.min), d.max);
        f8codes[o] = f32_to_f8(r, d.storage);
      }
    }
  }
  // Storage: the library keeps the grouped view [N, G, g] for unpacked codes of a grouped weight.
  const Shape code_shape = (groups > 1) ? Shape{n, groups, k / groups} : Shape{n, k};
  Tensor q;
  if (d.is_packed) {
    q = Tensor::zeros({packed_bytes(n * k, d)}, DType::u8);
    uint8_t* p = q.data<uint8_t>();
    const int per = 8 / d.bits;
    for (int64_t i = 0; i < n * k; ++i) {
      const int32_t u = codes[size_t(i)] - int32_t(d.min);  // signed codes stored as code - min
      p[i / per] = uint8_t(p[i / per] | (u << ((i % per) * d.bits)));
    }
  } else if (d.is_integer) {
    q = Tensor::empty(code_shape, d.storage);
    for (int64_t i = 0; i < n * k; ++i) {
      if (d.storage == DType::i8)
        q.data<int8_t>()[i] = int8_t(codes[size_t(i)]);
      else
        q.data<uint8_t>()[i] = uint8_t(codes[size_t(i)]);
    }
  } else {
    q = Tensor::empty(code_shape, d.storage);
    std::copy(f8codes.begin(), f8codes.end(), static_cast<uint8_t*>(q.data_ptr()));
  }
  const Shape sshape = groups == 0 ? Shape{1, 1} : groups == 1 ? Shape{n, 1} : Shape{n, groups, 1};
  Tensor s = Tensor::from_vector(sv, sshape, scale_dtype);
  Tensor z = d.is_unsigned ? Tensor::from_vector(zv, sshape, scale_dtype) : Tensor();
  return std::make_shared<SdnqWeight>(d, q, s, z, Shape{n, k});
}

std::shared_ptr<SdnqWeight> SdnqWeight::load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                             const SdnqDtype& d, std::vector<std::string>& consumed) {
  const auto s = sd.find(module + ".scale");
  if (s == sd.end()) return nullptr;
  const auto w = sd.find(module + ".weight");
  check(w != sd.end(), kCtx, module, ": has \"", module, ".scale\" but no \"", module, ".weight\"");
  for (const char* extra : {".scale_2", ".scale_zero_point", ".zero_point_scale", ".zero_point_2", ".svd_up",
                            ".svd_down"})
    check(!sd.count(module + extra), kCtx, module, ": \"", module, extra,
          "\" (double-quantized scales / SVD) is not supported by diffq");
  Tensor zp;
  if (const auto z = sd.find(module + ".zero_point"); z != sd.end()) {
    zp = z->second;
    consumed.push_back(z->first);
  }
  consumed.push_back(w->first);
  consumed.push_back(s->first);
  return std::make_shared<SdnqWeight>(d, w->second, s->second, zp, shape);
}

void SdnqWeight::save(io::StateDict& out, const std::string& module) const {
  out[module + ".weight"] = weight_;
  out[module + ".scale"] = scale_;
  if (zero_.defined()) out[module + ".zero_point"] = zero_;
}

}  // namespace diffq::quant::sdnq
