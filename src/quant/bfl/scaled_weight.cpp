#include "quant/bfl/scaled_weight.h"

#include <vector>

#include "diffq/error.h"

namespace diffq::quant {

Tensor ScaledWeight::dequantize(DType dtype) const {
  Tensor f = Tensor::empty({n_, k_}, DType::f32);
  dequant_rows_f32(0, n_, f.data<float>());
  return dtype == DType::f32 ? f : f.to(dtype);
}

void ScaledWeight::set_pre_quant_scale(const Tensor& s, const std::string& what) {
  check(s.dim() == 1 && s.size(0) == k_ && is_floating(s.dtype()), "quant", what, " must be a float [", k_,
        "] tensor, got ", s.str());
  pre_quant_scale_ = s.to(DType::f32).contiguous();
}

std::vector<Tensor> ScaledWeight::storage_tensors() const {
  std::vector<Tensor> v = packed_tensors();
  if (input_scale_.defined()) v.push_back(input_scale_);
  if (pre_quant_scale_.defined()) v.push_back(pre_quant_scale_);
  return v;
}

std::optional<TileLinearPlan> ScaledWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  check(x.dim() >= 1 && x.size(-1) == k_, "quant.linear", scheme_, ": input's last dimension is ",
        x.dim() ? x.size(-1) : 0, ", the weight has in_features ", k_);
  const DType cd = x.dtype();  // Diffusers: weight.to(compute_dtype); F.linear(x, weight) in x's dtype
  Tensor xs = x;
  if (pre_quant_scale_.defined()) {
    // x * pre_quant_scale in x's dtype (the product rounded to it), broadcast over the last dimension.
    const Tensor xf = x.to(DType::f32).contiguous();
    Tensor out = Tensor::empty(xf.shape(), DType::f32);
    const float* s = pre_quant_scale_.data<float>();
    const float* src = xf.data<float>();
    float* dst = out.data<float>();
    const int64_t m = xf.numel() / k_;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k_; ++c) dst[r * k_ + c] = round_through(cd, src[r * k_ + c] * s[c]);
    xs = cd == DType::f32 ? out : out.to(cd);
  }
  return TileLinearPlan{xs, bias, n_, k_, [this, cd](int64_t a, int64_t b, float* dst) {
                          dequant_rows_f32(a, b, dst);
                          if (cd != DType::f32)
                            for (int64_t i = 0, e = (b - a) * k_; i < e; ++i) dst[i] = round_through(cd, dst[i]);
                        }};
}

}  // namespace diffq::quant
