// linear_q on CUDA for SDNQ weights (sdnq_<dtype>: int8..int2, uint8..uint1-style packed codes, float8): sdnq's
// dequantize in the scale's dtype element by element (blockq::sdnq_value), rounded to x's dtype as sdnq's
// forward does (F.linear(x, dequantize(dtype = x's), bias)), into a buffer of x's dtype; then the dense
// cuBLASLt linear.
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/quant/scheme_params.h"
#include "quant/sdnq/sdnq_weight.h"

namespace diffq::backend::cuda {

namespace {

using quant::sdnq::SdnqWeight;

void sdnq_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<SdnqWeight>(c, "sdnq", [](const SdnqWeight&) { return false; });
  const quant::sdnq::SdnqDtype& d = w.dtype_traits();
  const std::vector<Tensor> st = w.storage_tensors();  // weight, scale[, zero_point]
  const Tensor codes = st.at(0).contiguous(), scale = st.at(1).contiguous();
  const Tensor zero = st.size() > 2 ? st[2].contiguous() : Tensor();
  const blockq::SdnqParams p = sdnq_params(w);
  check(!p.is_unsigned || (zero.defined() && zero.dtype() == scale.dtype()), "linear_q",
        "cuda: an unsigned sdnq weight needs a zero_point in the scale's dtype");
  Float8Table f8{};
  if (p.storage == 2)
    for (int i = 0; i < 256; ++i) f8.v[i] = d.storage == DType::f8_e5m2 ? f8_e5m2_to_f32(uint8_t(i)) : f8_e4m3fn_to_f32(uint8_t(i));
  const Tensor& x = c.inputs[0];
  const std::initializer_list<const Tensor*> packed = zero.defined()
                                                          ? std::initializer_list<const Tensor*>{&codes, &scale, &zero}
                                                          : std::initializer_list<const Tensor*>{&codes, &scale};
  out = dequantize_then_linear(c, "sdnq", packed, [&](Tensor& wd) {
    dequant_sdnq(p, static_cast<const uint8_t*>(codes.data_ptr()), scale.data_ptr(),
                 zero.defined() ? zero.data_ptr() : nullptr, f8, wd.size(0), x.dtype(), wd.data_ptr(), wd.dtype(),
                 wd.device().index);
  });
}

}  // namespace

void register_linear_q_sdnq_kernels() {
  for (const std::string& name : quant::sdnq::sdnq_supported_dtypes())
    ops::register_linear_q_kernel(DeviceKind::cuda, "sdnq_" + name, sdnq_linear);
}

}  // namespace diffq::backend::cuda
