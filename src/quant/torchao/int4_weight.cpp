#include "quant/torchao/int4_weight.h"

#include <algorithm>
#include <cmath>

#include "diffq/error.h"
#include "quant/tile_linear_plan.h"
#include "quant/torchao/affine.h"

namespace diffq::quant::torchao {

namespace {
constexpr const char* kCtx = "torchao.int4";
}

Int4Weight::Int4Weight(Tensor qdata, Tensor scale, Tensor zero_point, int64_t group_size, Shape shape)
    : TorchaoWeight(shape.size() == 2 ? shape[0] : 0, shape.size() == 2 ? shape[1] : 0, scale.dtype()),
      qdata_(qdata.contiguous()), scale_(scale.contiguous()), zero_(zero_point.contiguous()), g_(group_size) {
  check(shape.size() == 2 && g_ > 0 && k_ % g_ == 0 && k_ % 2 == 0, kCtx, "shape ", shape_str(shape),
        " is not [N, K] with K a multiple of group_size ", g_);
  check(qdata_.dtype() == DType::i8 && qdata_.shape() == Shape{n_, k_ / 2}, kCtx, "qdata must be int8 [", n_, ", ",
        k_ / 2, "], got ", qdata_.str());
  const Shape sz{k_ / g_, n_};
  check(is_floating(scale_.dtype()) && scale_.shape() == sz, kCtx, "scale must be a float tensor ", shape_str(sz),
        ", got ", scale_.str());
  check(zero_.dtype() == scale_.dtype() && zero_.shape() == sz, kCtx, "zero_point must be ",
        dtype_name(scale_.dtype()), " ", shape_str(sz), ", got ", zero_.str());
  const std::vector<float> s = scale_.to_f32_vector(), z = zero_.to_f32_vector();
  const int64_t kg = k_ / g_;
  scale_nk_.resize(s.size());
  zero_nk_.resize(z.size());
  for (int64_t gi = 0; gi < kg; ++gi)
    for (int64_t r = 0; r < n_; ++r) {
      scale_nk_[size_t(r * kg + gi)] = s[size_t(gi * n_ + r)];
      zero_nk_[size_t(r * kg + gi)] = z[size_t(gi * n_ + r)];
    }
}

std::shared_ptr<Int4Weight> Int4Weight::quantize(const Tensor& w, int64_t g) {
  check(w.dim() == 2 && is_floating(w.dtype()), kCtx, "weight must be a float [N, K] tensor, got ", w.str());
  const int64_t n = w.shape()[0], k = w.shape()[1];
  check(g > 0 && k % g == 0, kCtx, "weight ", shape_str(w.shape()), ": in_features ", k,
        " is not a multiple of group_size ", g);
  const int64_t kg = k / g;
  const std::vector<float> wf = w.to_f32_vector();
  std::vector<float> sv(size_t(kg * n)), zv(size_t(kg * n));
  Tensor q = Tensor::empty({n, k / 2}, DType::i8);
  int8_t* qp = q.data<int8_t>();
  std::vector<int8_t> codes(static_cast<size_t>(g));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t gi = 0; gi < kg; ++gi) {
      const float* x = wf.data() + r * k + gi * g;
      float mn = x[0], mx = x[0];
      for (int64_t i = 1; i < g; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
      const float scale = std::max(mx - mn, 1e-6f) / 15.0f;
      const float zero = mn + scale * 8.0f;
      for (int64_t i = 0; i < g; ++i) {
        float v = std::nearbyint((x[i] - mn) / scale);
        v = std::min(std::max(v, 0.0f), 15.0f);
        codes[size_t(i)] = int8_t(int32_t(v) - 8);
      }
      for (int64_t i = 0; i < g; i += 2)
        qp[r * (k / 2) + (gi * g + i) / 2] = int8_t((codes[size_t(i)] & 0xF) | (uint8_t(codes[size_t(i + 1)]) << 4));
      sv[size_t(gi * n + r)] = scale;
      zv[size_t(gi * n + r)] = zero;
    }
  Tensor s = Tensor::from_vector(sv, {kg, n}, w.dtype());
  Tensor z = Tensor::from_vector(zv, {kg, n}, w.dtype());
  return std::make_shared<Int4Weight>(q, s, z, g, Shape{n, k});
}

nlohmann::json Int4Weight::tensor_attributes() const {
  return {{"activation_dtype", torch_dtype_json(DType::bf16)}, {"block_size", {1, g_}}, {"shape", {n_, k_}}};
}

std::vector<std::pair<std::string, Tensor>> Int4Weight::tensor_data() const {
  return {{"qdata", qdata_}, {"scale", scale_}, {"zero_point", zero_}};
}

void Int4Weight::dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const {
  const uint8_t* q = reinterpret_cast<const uint8_t*>(qdata_.data<int8_t>());
  const int64_t kg = k_ / g_;
  for (int64_t r = n0; r < n1; ++r) {
    float* d = dst + (r - n0) * k_;
    dequant_int4_row_reference(q + r * (k_ / 2), k_, g_, scale_nk_.data() + r * kg, zero_nk_.data() + r * kg, d);
    if (out != DType::f32)
      for (int64_t c = 0; c < k_; ++c) d[c] = round_through(out, d[c]);
  }
}

std::optional<TileLinearPlan> Int4Weight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  return TileLinearPlan{x, bias, n_, k_, [this](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, DType::f32, dst); }};
}

void dequant_int4_row_reference(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero,
                                float* dst) {
  for (int64_t c = 0; c < k; ++c) {
    const uint8_t b = packed[c / 2];
    const int q = (c % 2 == 0) ? int(int8_t(uint8_t(b << 4))) >> 4 : int(int8_t(b)) >> 4;
    const float p = float(q) * scale[c / g];
    dst[c] = p + zero[c / g];
  }
}

}  // namespace diffq::quant::torchao
