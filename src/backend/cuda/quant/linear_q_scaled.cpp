// linear_q on CUDA for the pre-quantized "codes times scales" layouts of BFL single files (bfl_fp8r,
// bfl_nvfp4) and ModelOpt exports (modelopt_fp8, _fp8_pc, _int8, _int4_awq, _nvfp4), as ScaledWeight's CPU
// linear computes them (what Diffusers runs without its GPU kernels): W dequantized in f32
// (blockq::scaled_value) and rounded to x's dtype, x multiplied by pre_quant_scale first where the file has
// one (rounded to x's dtype), activations not quantized; then the dense cuBLASLt linear.
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"
#include "ops/ops.h"

namespace diffq::backend::cuda {

namespace {

using quant::ScaledWeight;

// The kernel parameters of w's layout, or a clear error for a layout this file does not decode.
blockq::ScaledParams params_of(const ScaledWeight& w, const Tensor& scale) {
  blockq::ScaledParams p;
  p.K = w.shape()[1];
  if (dynamic_cast<const quant::Fp8ScaledWeight*>(&w)) {
    p.kind = blockq::kScaledFp8;
    p.per_row = scale.numel() == w.shape()[0];
  } else if (const auto* nv = dynamic_cast<const quant::Nvfp4Weight*>(&w)) {
    p.kind = blockq::kScaledNvfp4;
    p.global_scale = nv->weight_scale_2();
  } else if (const auto* awq = dynamic_cast<const quant::Int4AwqWeight*>(&w)) {
    p.kind = blockq::kScaledInt4Awq;
    p.group = awq->group_size();
    p.scale_dtype = scale.dtype();
    check(p.scale_dtype == DType::f32 || p.scale_dtype == DType::bf16 || p.scale_dtype == DType::f16, "linear_q",
          "cuda: ", w.scheme(), " weight_scale of ", scale.str());
  } else {
    check(dynamic_cast<const quant::Int8ChannelWeight*>(&w) != nullptr, "linear_q", "cuda: no kernel for the ",
          w.scheme(), " layout");
    p.kind = blockq::kScaledInt8Channel;
  }
  if (p.kind != blockq::kScaledInt4Awq)
    check(scale.dtype() == (p.kind == blockq::kScaledNvfp4 ? DType::f8_e4m3fn : DType::f32), "linear_q", "cuda: ",
          w.scheme(), " scale of ", scale.str());
  return p;
}

void scaled_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<ScaledWeight>(c, "scaled", [](const ScaledWeight&) { return false; });
  const std::vector<Tensor> st = w.storage_tensors();  // codes, scale[, global scale][, input_scale][, pre_quant_scale]
  const Tensor q = st.at(0).contiguous(), scale = st.at(1).contiguous();
  const blockq::ScaledParams p = params_of(w, scale);
  Float8Table f8;
  for (int i = 0; i < 256; ++i) f8.v[i] = f8_e4m3fn_to_f32(uint8_t(i));
  Tensor x = c.inputs[0];
  const DType cd = x.dtype();
  if (w.pre_quant_scale().defined()) {  // x * pre_quant_scale, the f32 product rounded to x's dtype
    const Tensor s = w.pre_quant_scale();
    check(s.device() == x.device(), "linear_q", "cuda: the ", w.scheme(), " pre_quant_scale is on ", s.device().str());
    x = ops::mul(x.to(DType::f32), s).to(cd);
  }
  out = dequantize_then_linear(c, w.scheme().c_str(), {&q, &scale}, x, c.inputs.size() > 1 ? c.inputs[1] : Tensor(),
                               [&](Tensor& wd) {
                                 dequant_scaled(p, static_cast<const uint8_t*>(q.data_ptr()), scale.data_ptr(), f8,
                                                wd.size(0), cd, wd.data_ptr(), wd.dtype(), wd.device().index);
                               });
}

}  // namespace

void register_linear_q_scaled_kernels() {
  for (const char* s : {"bfl_fp8r", "bfl_nvfp4", "modelopt_fp8", "modelopt_fp8_pc", "modelopt_int8", "modelopt_int4_awq",
                        "modelopt_nvfp4"})
    ops::register_linear_q_kernel(DeviceKind::cuda, s, scaled_linear);
}

}  // namespace diffq::backend::cuda
