#include "quant/torchao/affine.h"

#include <algorithm>

namespace diffq::quant::torchao {

AffineParams choose_qparams(float mn, float mx, MappingType mapping, int32_t qmin, int32_t qmax,
                            float eps, DType cd) {
  const float min_neg = std::min(mn, 0.0f), max_pos = std::max(mx, 0.0f);
  AffineParams p;
  if (mapping == MappingType::Asymmetric) {
    float scale = round_through(cd, round_through(cd, max_pos - min_neg) / float(qmax - qmin));
    scale = round_through(cd, std::max(scale, eps));
    float zp = float(qmin) - std::nearbyint(round_through(cd, min_neg / scale));
    zp = round_through(cd, zp);
    zp = std::min(std::max(zp, float(qmin)), float(qmax));
    p.scale = scale;
    p.zero_point = int32_t(zp);
    return p;
  }
  float scale;
  if (mapping == MappingType::Symmetric) {
    const float m = std::max(-min_neg, max_pos);
    scale = round_through(cd, m / (float(qmax - qmin) / 2.0f));
  } else {
    const float smin = round_through(cd, min_neg / float(qmin));
    const float smax = round_through(cd, max_pos / float(qmax));
    scale = smin > smax ? smin : smax;
  }
  p.zero_point = int32_t(double(qmax + qmin + 1) / 2.0);  // python int() truncates toward zero
  p.scale = round_through(cd, std::max(scale, eps));
  return p;
}

float float8_max(DType f8) { return f8 == DType::f8_e5m2 ? 57344.0f : 448.0f; }

uint8_t float8_quantize_one(float x, float scale, DType f8) {
  const float m = float8_max(f8);
  float v = x / scale;
  if (!std::isnan(v)) v = std::min(std::max(v, -m), m);
  return f8 == DType::f8_e5m2 ? f32_to_f8_e5m2(v) : f32_to_f8_e4m3fn(v);
}

}  // namespace diffq::quant::torchao
