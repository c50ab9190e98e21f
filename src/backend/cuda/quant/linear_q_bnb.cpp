// linear_q on CUDA for bitsandbytes 4-bit weights (bnb_nf4, bnb_fp4, with or without double quant): as
// bnb's Linear4bit, x and the bias (cast to x's dtype first) go to compute_dtype, the weight is
// dequantized (code x absmax in f32, one rounding to compute_dtype: dequantize_4bit) and the linear runs
// in compute_dtype; the result is cast back to x's dtype. The packed codes and block statistics are what
// lives on the GPU; the dequantized weight is a per-call buffer (linear_q_common.h).
#include <algorithm>

#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "quant/bnb/bnb_4bit.h"

namespace diffq::backend::cuda {

namespace {

using quant::Bnb4bitWeight;

void bnb4_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<Bnb4bitWeight>(c, "bnb 4-bit", [](const Bnb4bitWeight&) { return false; });
  const quant::Bnb4bitState& st = w.state();
  blockq::Bnb4Params p;
  std::copy(w.code(), w.code() + 16, p.code);
  p.blocksize = st.blocksize;
  p.nested = st.nested;
  p.nested_blocksize = st.nested_blocksize;
  p.nested_offset = st.nested_offset;
  const Tensor packed = w.packed().contiguous(), absmax = st.absmax.contiguous();
  const Tensor nested_absmax = st.nested ? st.nested_absmax.contiguous() : Tensor(),
               nested_map = st.nested ? st.nested_quant_map.contiguous() : Tensor();
  check(absmax.dtype() == (st.nested ? DType::u8 : DType::f32), "linear_q", "cuda: a bnb 4-bit absmax of ",
        absmax.str(), " (expected ", st.nested ? "uint8 codes" : "float32", ")");
  const Tensor& x0 = c.inputs[0];
  const DType cd = w.compute_dtype();
  const Tensor bias0 = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const Tensor x = x0.to(cd), bias = bias0.defined() ? bias0.to(x0.dtype()).to(cd) : Tensor();
  const Tensor y = dequantize_then_linear(
      c, "bnb 4-bit", st.nested ? std::initializer_list<const Tensor*>{&packed, &absmax, &nested_absmax, &nested_map}
                                : std::initializer_list<const Tensor*>{&packed, &absmax},
      x, bias, [&](Tensor& wd) {
        dequant_bnb4(p, static_cast<const uint8_t*>(packed.data_ptr()), absmax.data_ptr(),
                     st.nested ? static_cast<const float*>(nested_absmax.data_ptr()) : nullptr,
                     st.nested ? static_cast<const float*>(nested_map.data_ptr()) : nullptr, wd.numel(), wd.data_ptr(),
                     wd.dtype(), wd.device().index);
      });
  out = y.dtype() == x0.dtype() ? y : y.to(x0.dtype());
}

}  // namespace

void register_linear_q_bnb_kernels() {
  for (const char* s : {"bnb_nf4", "bnb_fp4"}) ops::register_linear_q_kernel(DeviceKind::cuda, s, bnb4_linear);
}

}  // namespace diffq::backend::cuda
