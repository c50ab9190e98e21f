// linear_q on CUDA for Nunchaku Lite weights (quant/nunchaku/nunchaku.h), as the CPU computes them:
//  * nunchaku_svdq_w4a4_int4 (SVDQuant W4A4): the activations ARE quantized, on the device, per token and
//    group of 64 (x / smooth_factor, int4 codes, f32 scales), the int4 x int4 products summed exactly per
//    group (dp4a) and folded in group order with the activation and weight scales, then the low-rank branch
//    on the unsmoothed x and the bias (read through the packed layout's permutation), one rounding to x's
//    dtype: value for value the CPU's kernel (backend/cpu/quant/nunchaku_linear.h), never a dense
//    dequantization of the weight (nunchaku_kernels.h; the value math nunchaku_values.cuh).
//  * nunchaku_awq_w4a16_int4 (AWQ W4A16): the weight dequantized (code * wscale + wzero in f32, rounded to
//    x's dtype) into a per-call buffer, then the dense cuBLASLt linear (the CPU's generic path).
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/quant/nunchaku_kernels.h"
#include "backend/cuda/runtime.h"
#include "quant/nunchaku/nunchaku.h"

namespace diffq::backend::cuda {

namespace {

using quant::nunchaku::AwqW4A16Weight;
using quant::nunchaku::SvdqW4A4Weight;

constexpr const char* kSvdq = "nunchaku_svdq_w4a4_int4";
constexpr const char* kAwq = "nunchaku_awq_w4a16_int4";

bool float_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

void svdq_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<SvdqW4A4Weight>(c, kSvdq, [](const SvdqW4A4Weight&) { return false; });
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  w.check_input(x);
  const std::vector<Tensor> st = w.storage_tensors();  // codes, wscales, smooth, down^T, up (logical order)
  const Tensor codes = st.at(0).contiguous(), wscales = st.at(1).contiguous(), smooth = st.at(2).contiguous(),
               down = st.at(3).contiguous(), up = st.at(4).contiguous();
  const int64_t N = w.shape()[0], K = w.shape()[1], R = w.rank(), M = K ? x.numel() / K : 0;
  check(K % 64 == 0, "linear_q", "cuda: ", kSvdq, " in_features ", K, " is not a multiple of the group size 64");
  check(float_dtype(x.dtype()), "linear_q", "cuda: ", kSvdq, " input ", x.str(),
        " is not float32, bfloat16 or float16");
  check(codes.dtype() == DType::i8, "linear_q", "cuda: ", kSvdq, " codes of ", codes.str(), " (expected int8)");
  const char* names[] = {"codes", "wscales", "smooth_factor", "proj_down", "proj_up"};
  for (size_t i = 0; i < 5; ++i) {
    const Tensor& t = i == 0 ? codes : i == 1 ? wscales : i == 2 ? smooth : i == 3 ? down : up;
    if (i > 0)
      check(t.dtype() == DType::f32, "linear_q", "cuda: ", kSvdq, " ", names[i], " of ", t.str(), " (expected float32)");
    if (t.numel() > 0)  // (rank 0: empty low-rank tensors are never read)
      check(t.device() == x.device(), "linear_q", "cuda: the ", kSvdq, " ", names[i], " is on ", t.device().str(),
            ", x on ", x.device().str());
  }
  if (bias.defined()) {
    check(bias.numel() == N, "linear_q", "cuda: ", kSvdq, " bias has ", bias.numel(), " elements, expected ", N);
    check(float_dtype(bias.dtype()), "linear_q", "cuda: ", kSvdq, " bias of ", bias.str(),
          " (expected float32, bfloat16 or float16)");
    check(bias.device() == x.device(), "linear_q", "cuda: the ", kSvdq, " bias is on ", bias.device().str(), ", x on ",
          x.device().str());
  }
  const Device d = x.device();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  out = Tensor::empty(out_shape, x.dtype(), d);
  if (M == 0 || N == 0) return;
  const Tensor xc = x.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  const Tensor q = Tensor::empty({M, K}, DType::i8, d), ascale = Tensor::empty({M, K / 64}, DType::f32, d);
  const Tensor main = Tensor::empty({M, N}, DType::f32, d);
  const Tensor la = R > 0 ? Tensor::empty({M, R}, DType::f32, d) : Tensor();
  DeviceGuard guard(d.index);
  svdq_quantize_activations(xc.data_ptr(), xc.dtype(), static_cast<const float*>(smooth.data_ptr()), M, K,
                            static_cast<int8_t*>(q.data_ptr()), static_cast<float*>(ascale.data_ptr()), d.index);
  svdq_int4_gemm(static_cast<const int8_t*>(q.data_ptr()), static_cast<const float*>(ascale.data_ptr()),
                 static_cast<const int8_t*>(codes.data_ptr()), static_cast<const float*>(wscales.data_ptr()), M, N, K,
                 static_cast<float*>(main.data_ptr()), d.index);
  if (R > 0)
    svdq_lowrank_down(xc.data_ptr(), xc.dtype(), static_cast<const float*>(down.data_ptr()), M, K, R,
                      static_cast<float*>(la.data_ptr()), d.index);
  svdq_epilogue(static_cast<const float*>(main.data_ptr()), R > 0 ? static_cast<const float*>(la.data_ptr()) : nullptr,
                static_cast<const float*>(up.data_ptr()), b.defined() ? b.data_ptr() : nullptr,
                b.defined() ? b.dtype() : DType::f32, w.packed(), M, N, R, out.data_ptr(), out.dtype(), d.index);
}

void awq_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<AwqW4A16Weight>(c, kAwq, [](const AwqW4A16Weight&) { return false; });
  const std::vector<Tensor> st = w.storage_tensors();  // qweight int32 [N/4, K/2], wscales, wzeros f32 [K/64, N]
  const Tensor qw = st.at(0).contiguous(), ws = st.at(1).contiguous(), wz = st.at(2).contiguous();
  const int64_t N = w.shape()[0], K = w.shape()[1];
  check(qw.dtype() == DType::i32 && qw.shape() == Shape{N / 4, K / 2} && K % 64 == 0 && N % 4 == 0, "linear_q",
        "cuda: ", kAwq, " qweight of ", qw.str(), " for a [", N, ", ", K, "] weight (expected int32 [N/4, K/2], K % 64 == 0)");
  for (const Tensor* t : {&ws, &wz})
    check(t->dtype() == DType::f32 && t->shape() == Shape{K / 64, N}, "linear_q", "cuda: ", kAwq, " scales of ",
          t->str(), " (expected float32 [K/64, N])");
  const DType dt = c.inputs[0].dtype();
  out = dequantize_then_linear(c, kAwq, {&qw, &ws, &wz}, [&](Tensor& wd) {
    dequant_nunchaku_awq(static_cast<const int32_t*>(qw.data_ptr()), static_cast<const float*>(ws.data_ptr()),
                         static_cast<const float*>(wz.data_ptr()), N, K, dt, wd.data_ptr(), wd.dtype(),
                         wd.device().index);
  });
}

}  // namespace

void register_linear_q_nunchaku_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cuda, kSvdq, svdq_linear);
  ops::register_linear_q_kernel(DeviceKind::cuda, kAwq, awq_linear);
}

}  // namespace diffq::backend::cuda
