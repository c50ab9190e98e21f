// linear_q on CUDA for bitsandbytes 4-bit weights (bnb_nf4, bnb_fp4, with or without double quant): as
// bnb's Linear4bit, x and the bias (cast to x's dtype first) go to compute_dtype, the weight is
// dequantized (code x absmax in f32, one rounding to compute_dtype: dequantize_4bit) and the linear runs
// in compute_dtype; the result is cast back to x's dtype. The packed codes and block statistics are what
// lives on the GPU; the dequantized weight is a per-call buffer (linear_q_common.h).
// And for LLM.int8 weights (bnb_int8), as the CPU's kernel (backend/cpu/quant/bnb_int8_linear.h) computes
// Linear8bitLt: x's float16 values quantized per row on the device with the outlier threshold (outlier
// elements left out of the absmax, their columns' codes zeroed), the int32 product on cuBLASLt's IMMA GEMM
// (exact, where the CPU's f32 GEMM of the codes is exact below 2^24), the int8_mm_dequant epilogue with the
// bias in x's dtype, then x's outlier columns times the dequantized weight columns, all value for value
// (bnb_int8_values.cuh); in the dequantize_fp mode the weight dequantized to x's dtype and the dense linear.
#include <algorithm>

#include "backend/cuda/quant/bnb_int8_kernels.h"
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/runtime.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_int8.h"

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

void bnb_int8_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<quant::Bnb8bitWeight>(c, "bnb_int8", [](const quant::Bnb8bitWeight&) { return false; });
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  w.check_input(x, bias);  // x [..., K] of f32 / bf16 / f16, bias [N]
  const DType dt = x.dtype();
  const Tensor cb = w.cb().contiguous(), scb = w.scb().contiguous();
  if (bias.defined())
    check(bias.dtype() == DType::f32 || bias.dtype() == DType::bf16 || bias.dtype() == DType::f16, "linear_q",
          "cuda: bnb_int8 bias of ", bias.str(), " (expected float32, bfloat16 or float16)");
  if (w.mode() == quant::Int8LinearMode::dequantize_fp) {  // W rounded to x's dtype, the bias cast to it
    out = dequantize_then_linear(c, "bnb_int8", {&cb, &scb}, x, bias.defined() ? bias.to(dt) : Tensor(),
                                 [&](Tensor& wd) {
                                   dequant_bnb8_fp(static_cast<const int8_t*>(cb.data_ptr()),
                                                   static_cast<const float*>(scb.data_ptr()), wd.size(0), wd.size(1),
                                                   dt, wd.data_ptr(), wd.dtype(), wd.device().index);
                                 });
    return;
  }
  for (const Tensor* t : {&cb, &scb})
    check(t->device() == x.device(), "linear_q", "cuda: the bnb_int8 weight is on ", t->device().str(), ", x on ",
          x.device().str());
  if (bias.defined())
    check(bias.device() == x.device(), "linear_q", "cuda: the bnb_int8 bias is on ", bias.device().str(), ", x on ",
          x.device().str());
  const int64_t N = cb.size(0), K = cb.size(1), M = K ? x.numel() / K : 0, Kp = (K + 3) / 4 * 4;
  const Device d = x.device();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  out = Tensor::empty(out_shape, dt, d);
  if (M == 0 || N == 0) return;
  const bool sparse = w.threshold() > 0.0;
  const float thr16 = f16_to_f32(f32_to_f16(float(w.threshold())));  // the comparison runs in float16
  const Tensor xc = x.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  const Tensor q = Tensor::empty({M, Kp}, DType::i8, d), absmax = Tensor::empty({M}, DType::f32, d);
  const Tensor flags = Tensor::empty({std::max<int64_t>(K, 1)}, DType::u8, d),
               cols = Tensor::empty({std::max<int64_t>(K, 1)}, DType::i32, d), n_cols = Tensor::empty({1}, DType::i32, d);
  const Tensor acc = Tensor::empty({M, N}, DType::i32, d);
  const Tensor wq = Kp == K ? cb : Tensor::empty({N, Kp}, DType::i8, d);
  DeviceGuard guard(d.index);
  bnb8_quantize_activations(xc.data_ptr(), dt, M, K, Kp, sparse, thr16, static_cast<int8_t*>(q.data_ptr()),
                            static_cast<float*>(absmax.data_ptr()), static_cast<uint8_t*>(flags.data_ptr()),
                            static_cast<int32_t*>(cols.data_ptr()), static_cast<int32_t*>(n_cols.data_ptr()), d.index);
  if (Kp != K)  // the IMMA GEMM wants K % 4 == 0: zero columns add nothing to the integer sums
    bnb8_pad_codes(static_cast<const int8_t*>(cb.data_ptr()), N, K, Kp, static_cast<int8_t*>(wq.data_ptr()), d.index);
  gemm_s8s8_s32(d.index, static_cast<const int8_t*>(q.data_ptr()), static_cast<const int8_t*>(wq.data_ptr()),
                static_cast<int32_t*>(acc.data_ptr()), M, N, Kp);
  bnb8_epilogue(static_cast<const int32_t*>(acc.data_ptr()), static_cast<const float*>(absmax.data_ptr()),
                static_cast<const int8_t*>(cb.data_ptr()), static_cast<const float*>(scb.data_ptr()),
                b.defined() ? b.data_ptr() : nullptr, b.defined() ? b.dtype() : DType::f32, xc.data_ptr(),
                static_cast<const int32_t*>(cols.data_ptr()), static_cast<const int32_t*>(n_cols.data_ptr()), M, N, K,
                out.data_ptr(), dt, d.index);
}

}  // namespace

void register_linear_q_bnb_kernels() {
  for (const char* s : {"bnb_nf4", "bnb_fp4"}) ops::register_linear_q_kernel(DeviceKind::cuda, s, bnb4_linear);
  ops::register_linear_q_kernel(DeviceKind::cuda, "bnb_int8", bnb_int8_linear);
}

}  // namespace diffq::backend::cuda
