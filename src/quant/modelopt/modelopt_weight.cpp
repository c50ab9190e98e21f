#include "quant/modelopt/modelopt_weight.h"

#include "diffq/error.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"

namespace diffq::quant {

std::shared_ptr<ScaledWeight> load_modelopt_weight(const StateDict& sd, const std::string& m, const Shape& shape,
                                                   ModelOptAlgo algo, const std::string& source,
                                                   std::vector<std::string>& consumed) {
  constexpr const char* ctx = "modelopt";
  const auto w = sd.find(m + ".weight");
  const auto s = sd.find(m + ".weight_scale");
  if (s == sd.end()) {
    check(w == sd.end() || is_floating(w->second.dtype()) && dtype_size(w->second.dtype()) >= 2, ctx, source, ": ", m,
          ".weight is ", w == sd.end() ? "" : std::string(dtype_name(w->second.dtype())), " but ", m,
          ".weight_scale is missing");
    return nullptr;
  }
  check(w != sd.end(), ctx, source, ": ", m, ".weight_scale has no ", m, ".weight");
  const std::string what = m + ".weight in " + source;
  const char* scheme = modelopt_scheme_name(algo);
  std::shared_ptr<ScaledWeight> q;
  switch (algo) {
    case ModelOptAlgo::fp8:
    case ModelOptAlgo::fp8_per_channel: {
      auto f = std::make_shared<Fp8ScaledWeight>(w->second, s->second.to(DType::f32), scheme, what);
      q = f;
      break;
    }
    case ModelOptAlgo::int8:
      q = std::make_shared<Int8ChannelWeight>(w->second, s->second.to(DType::f32), scheme, what);
      break;
    case ModelOptAlgo::int4_awq:
      q = std::make_shared<Int4AwqWeight>(w->second, s->second, scheme, what);
      break;
    case ModelOptAlgo::nvfp4: {
      const auto s2 = sd.find(m + ".weight_scale_2");
      check(s2 != sd.end(), ctx, source, ": ", m, " is NVFP4 but ", m, ".weight_scale_2 is missing");
      q = std::make_shared<Nvfp4Weight>(w->second, s->second, s2->second.to(DType::f32), scheme, what);
      consumed.push_back(m + ".weight_scale_2");
      break;
    }
  }
  check(q->shape() == shape, ctx, source, ": ", m, " holds a ", shape_str(q->shape()), " weight, the model expects ",
        shape_str(shape));
  consumed.push_back(m + ".weight");
  consumed.push_back(m + ".weight_scale");
  if (auto it = sd.find(m + ".input_scale"); it != sd.end()) {
    q->set_input_scale(it->second.to(DType::f32));
    consumed.push_back(it->first);
  }
  if (auto it = sd.find(m + ".pre_quant_scale"); it != sd.end()) {
    q->set_pre_quant_scale(it->second, m + ".pre_quant_scale in " + source);
    consumed.push_back(it->first);
  }
  return q;
}

}  // namespace diffq::quant
