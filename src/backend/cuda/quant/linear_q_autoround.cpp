// linear_q on CUDA for AutoRound's GPTQ-style packed weights (autoround_int2/4/8): QuantLinear's
// scales * (q - zp) in x's dtype element by element (blockq::autoround_value), into a buffer of x's dtype;
// then the dense cuBLASLt linear.
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/quant/scheme_params.h"
#include "quant/autoround/autoround_weight.h"

namespace diffq::backend::cuda {

namespace {

using quant::autoround::AutoRoundWeight;

void autoround_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<AutoRoundWeight>(c, "autoround", [](const AutoRoundWeight&) { return false; });
  const std::vector<Tensor> st = w.storage_tensors();  // qweight, qzeros, scales[, g_idx]
  const Tensor qweight = st.at(0).contiguous(), qzeros = st.at(1).contiguous(), scales = st.at(2).contiguous();
  const Tensor g_idx = st.size() > 3 ? st[3].contiguous() : Tensor();
  const blockq::AutoRoundParams p = autoround_params(w);
  check(p.scale_dtype == DType::f32 || p.scale_dtype == DType::bf16 || p.scale_dtype == DType::f16, "linear_q",
        "cuda: autoround scales of ", scales.str());
  const Tensor& x = c.inputs[0];
  const std::initializer_list<const Tensor*> packed =
      g_idx.defined() ? std::initializer_list<const Tensor*>{&qweight, &qzeros, &scales, &g_idx}
                      : std::initializer_list<const Tensor*>{&qweight, &qzeros, &scales};
  out = dequantize_then_linear(c, "autoround", packed, [&](Tensor& wd) {
    dequant_autoround(p, static_cast<const uint32_t*>(qweight.data_ptr()), static_cast<const uint32_t*>(qzeros.data_ptr()),
                      scales.data_ptr(), g_idx.defined() ? g_idx.data_ptr() : nullptr, x.dtype(), wd.data_ptr(),
                      wd.dtype(), wd.device().index);
  });
}

}  // namespace

void register_linear_q_autoround_kernels() {
  for (const char* s : {"autoround_int2", "autoround_int4", "autoround_int8"})
    ops::register_linear_q_kernel(DeviceKind::cuda, s, autoround_linear);
}

}  // namespace diffq::backend::cuda
