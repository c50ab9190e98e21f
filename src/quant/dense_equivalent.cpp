#include "quant/dense_equivalent.h"

#include <algorithm>

#include "quant/bfl/scaled_weight.h"
#include "quant/nunchaku/nunchaku.h"

namespace diffq::quant {

Tensor dense_equivalent(const QuantizedWeight& w, DType dtype) {
  const auto* sw = dynamic_cast<const ScaledWeight*>(&w);
  if (!sw || !sw->pre_quant_scale().defined()) return w.dequantize(dtype);
  Tensor f = w.dequantize(DType::f32).contiguous();  // a fresh float32 tensor
  const int64_t n = f.size(0), k = f.size(1);
  const float* s = sw->pre_quant_scale().data<float>();
  float* d = f.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) d[i * k + j] *= s[j];
  return dtype == DType::f32 ? f : f.to(dtype);
}

Tensor dense_equivalent_bias(const QuantizedWeight& w, const Tensor& bias) {
  const auto* sv = dynamic_cast<const nunchaku::SvdqW4A4Weight*>(&w);
  if (!bias.defined() || !sv || !sv->packed()) return bias;
  const std::vector<float> b = sv->logical_bias(bias);
  Tensor t = Tensor::empty({int64_t(b.size())}, DType::f32);
  std::copy(b.begin(), b.end(), t.data<float>());
  return bias.dtype() == DType::f32 ? t : t.to(bias.dtype());
}

}  // namespace diffq::quant
