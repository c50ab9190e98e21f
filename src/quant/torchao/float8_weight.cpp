#include "quant/torchao/float8_weight.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/tile_linear_plan.h"
#include "quant/torchao/affine_int8_weight.h"

namespace diffq::quant::torchao {

namespace {

constexpr const char* kCtx = "torchao.float8";

float f8_to_f32(uint8_t v, DType f8) { return f8 == DType::f8_e5m2 ? f8_e5m2_to_f32(v) : f8_e4m3fn_to_f32(v); }

float amax_abs(const float* p, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(p[i]);
    if (std::isnan(a)) return a;
    m = std::max(m, a);
  }
  return m;
}

nlohmann::json dtype_named(const char* n) { return {{"_type", "torch.dtype"}, {"_data", n}}; }
const char* f8_name(DType d) { return d == DType::f8_e5m2 ? "float8_e5m2" : "float8_e4m3fn"; }

}  // namespace

Float8Weight::Float8Weight(Tensor qdata, Tensor scale, int64_t bn, int64_t bk, DType dtype,
                           std::optional<Float8ActQuant> act)
    : TorchaoWeight(qdata.dim() == 2 ? qdata.shape()[0] : 0, qdata.dim() == 2 ? qdata.shape()[1] : 0, dtype),
      qdata_(qdata.contiguous()), scale_(scale.contiguous()), bn_(bn), bk_(bk), act_(act) {
  check(qdata_.dim() == 2 && (qdata_.dtype() == DType::f8_e4m3fn || qdata_.dtype() == DType::f8_e5m2), kCtx,
        "qdata must be float8 [N, K], got ", qdata_.str());
  check(bn_ > 0 && bk_ > 0 && n_ % bn_ == 0 && k_ % bk_ == 0, kCtx, "block_size [", bn_, ", ", bk_,
        "] does not divide ", shape_str(qdata_.shape()));
  check(scale_.dtype() == DType::f32 && scale_.numel() == (n_ / bn_) * (k_ / bk_), kCtx, "scale must be float32 with ",
        (n_ / bn_) * (k_ / bk_), " elements for block_size [", bn_, ", ", bk_, "], got ", scale_.str());
  scale_f_ = scale_.to_f32_vector();
}

std::shared_ptr<Float8Weight> Float8Weight::quantize(const Tensor& w, DType f8, const Granularity& g,
                                                     std::optional<Float8ActQuant> act) {
  check(w.dim() == 2 && is_floating(w.dtype()) && dtype_size(w.dtype()) >= 2, kCtx,
        "weight must be a float [N, K] tensor, got ", w.str());
  const int64_t n = w.shape()[0], k = w.shape()[1];
  auto [bn, bk] = block_size_for(g, n, k, kCtx);
  const int64_t nb = n / bn, kb = k / bk;
  const std::vector<float> wf = w.to_f32_vector();
  std::vector<float> amax(size_t(nb * kb), 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      float& a = amax[size_t((r / bn) * kb + c / bk)];
      const float v = std::fabs(wf[size_t(r * k + c)]);
      a = std::isnan(v) || std::isnan(a) ? NAN : std::max(a, v);
    }
  std::vector<float> sv(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) sv[i] = float8_scale(amax[i], float8_max(f8), w.dtype());
  Tensor q = Tensor::empty({n, k}, f8);
  uint8_t* qp = static_cast<uint8_t*>(q.data_ptr());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      qp[r * k + c] = float8_quantize_one(wf[size_t(r * k + c)], sv[size_t((r / bn) * kb + c / bk)], f8);
  return std::make_shared<Float8Weight>(q, Tensor::from_vector(sv, {nb, kb}, DType::f32), bn, bk, w.dtype(), act);
}

nlohmann::json Float8Weight::tensor_attributes() const {
  nlohmann::json mm = nullptr, act = nullptr;
  const nlohmann::json pref = {{"_type", "KernelPreference"}, {"_data", "AUTO"}};
  if (act_) {
    mm = {{"_type", "Float8MMConfig"}, {"_data", {{"emulate", false}, {"use_fast_accum", true}, {"pad_inner_dim", false}}}};
    const nlohmann::json g = act_->granularity.type == Granularity::PerTensor
                                 ? nlohmann::json{{"_type", "PerTensor"}, {"_data", nlohmann::json::object()}}
                                 : nlohmann::json{{"_type", "PerRow"}, {"_data", {{"dim", act_->granularity.dim}}}};
    act = {{"_type", "QuantizeTensorToFloat8Kwargs"},
           {"_data", {{"float8_dtype", dtype_named(f8_name(act_->float8))}, {"granularity", g}, {"mm_config", nullptr},
                      {"hp_value_lb", nullptr}, {"hp_value_ub", nullptr}, {"kernel_preference", pref}}}};
  }
  return {{"block_size", {bn_, bk_}}, {"mm_config", mm}, {"act_quant_kwargs", act}, {"kernel_preference", pref},
          {"dtype", torch_dtype_json(dtype_)}};
}

std::vector<std::pair<std::string, Tensor>> Float8Weight::tensor_data() const {
  return {{"qdata", qdata_}, {"scale", scale_}};
}

void Float8Weight::dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const {
  const uint8_t* q = static_cast<const uint8_t*>(qdata_.data_ptr());
  const DType f8 = qdata_.dtype();
  const int64_t kb = k_ / bk_;
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = f8_to_f32(uint8_t(i), f8);
  for (int64_t r = n0; r < n1; ++r) {
    float* d = dst + (r - n0) * k_;
    for (int64_t c = 0; c < k_; ++c) d[c] = round_through(out, lut[q[r * k_ + c]] * scale_f_[size_t((r / bn_) * kb + c / bk_)]);
  }
}

void float8_quant_dequant_activations(const float* x, int64_t m, int64_t k, DType dt, const Float8ActQuant& a,
                                      float* out) {
  const float fmax = float8_max(a.float8);
  auto run_row = [&](int64_t r, float scale) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t q = float8_quantize_one(x[r * k + c], scale, a.float8);
      out[r * k + c] = f8_to_f32(q, a.float8) * scale;
    }
  };
  if (a.granularity.type == Granularity::PerTensor) {
    const float scale = float8_scale(amax_abs(x, m * k), fmax, dt);
    core::parallel_for(m, 8, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) run_row(r, scale);
    });
    return;
  }
  core::parallel_for(m, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) run_row(r, float8_scale(amax_abs(x + r * k, k), fmax, dt));
  });
}

std::optional<TileLinearPlan> Float8Weight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  if (!act_) {
    // torchao: matmul(x, dequantize()) in x's dtype; here the dequantized weight (rounded to the weight
    // dtype as dequantize() does) feeds the f32 tiled GEMM.
    const DType wd = dtype_;
    return TileLinearPlan{x, bias, n_, k_, [this, wd](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, wd, dst); }};
  }
  check(x.dim() >= 1 && x.shape().back() == k_, kCtx, "input's last dimension is ", x.dim() ? x.shape().back() : 0,
        ", the weight has in_features ", k_);
  const Tensor xf = x.to(DType::f32).contiguous();
  const int64_t m = xf.numel() / std::max<int64_t>(k_, 1);
  Tensor xq = Tensor::empty(xf.shape(), DType::f32);
  float8_quant_dequant_activations(xf.data<float>(), m, k_, x.dtype(), *act_, xq.data<float>());
  // _scaled_mm: (x_fp8 * sx) @ (w_fp8 * sw)^T accumulated in f32, + bias, cast to x's dtype.
  return TileLinearPlan{xq, bias, n_, k_, [this](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, DType::f32, dst); }};
}

}  // namespace diffq::quant::torchao
