// linear_q on CUDA for torchao's weight-only schemes: int4 (Int4WeightOnlyConfig), int8 (Int8WeightOnlyConfig: Int8Tensor without
// activation quantization; dequantized into the activation's dtype as torchao's dequantize(x.dtype)) and
// float8 (Float8WeightOnlyConfig: Float8Tensor; dequantized as dequantize() rounds, to the weight's own
// dtype, held in the activation's), then the dense cuBLASLt GEMM with f32 accumulation (dequant_kernels.cu).
// (torch's int8 x int8 GEMM is slower than bf16 on the H200, ../shared/peers/h200-diffq.md; IMMA against
// this path is the measurement issue 37 asks for.)
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/dynamic_act.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/runtime.h"
#include "quant/torchao/affine_int8_weight.h"
#include "quant/torchao/float8_weight.h"
#include "quant/torchao/int4_weight.h"

namespace diffq::backend::cuda {

namespace {

using quant::torchao::AffineInt8Weight;
using quant::torchao::Float8Weight;
using quant::torchao::Int4Weight;

void torchao_int8wo(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<AffineInt8Weight>(c, "torchao_int8wo",
                                             [](const AffineInt8Weight& a) { return a.act_granularity().has_value(); });
  const Tensor q = w.qdata().contiguous(), scale = w.scale().contiguous(), zp = w.zero_point().contiguous();
  out = dequantize_then_linear(c, "torchao_int8wo", {&q, &scale, &zp}, [&](Tensor& wd) {
    dequant_affine_int8(static_cast<const int8_t*>(q.data_ptr()), scale.data_ptr(), scale.dtype(),
                        static_cast<const int8_t*>(zp.data_ptr()), wd.size(0), wd.size(1), w.block_rows(),
                        w.block_cols(), wd.data_ptr(), wd.dtype(), wd.device().index);
  });
}

void torchao_float8wo(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<Float8Weight>(c, "torchao_float8wo", [](const Float8Weight& a) { return a.dynamic_activation(); });
  const Tensor q = w.qdata().contiguous(), scale = w.scale().contiguous();
  check(scale.dtype() == DType::f32, "linear_q", "cuda: the torchao_float8wo scale is ", scale.str(), ", not float32");
  Float8Table table;
  for (int i = 0; i < 256; ++i)
    table.v[i] = q.dtype() == DType::f8_e5m2 ? f8_e5m2_to_f32(uint8_t(i)) : f8_e4m3fn_to_f32(uint8_t(i));
  out = dequantize_then_linear(c, "torchao_float8wo", {&q, &scale}, [&](Tensor& wd) {
    dequant_float8(static_cast<const uint8_t*>(q.data_ptr()), table, static_cast<const float*>(scale.data_ptr()),
                   wd.size(0), wd.size(1), w.block_rows(), w.block_cols(), w.dtype(), wd.data_ptr(), wd.dtype(),
                   wd.device().index);
  });
}

// Int4WeightOnlyConfig: q * scale + zero in f32 per element (the CPU's tile plan: the f32 values feed the
// GEMM unrounded; here they are held in x's dtype).
void torchao_int4wo(const OpCall& c, Tensor& out) {
  // IntxWeightOnlyConfig(int4) holds one code per int8 (AffineInt8Weight) under the same scheme name.
  if (dynamic_cast<const AffineInt8Weight*>(c.attrs.packed)) return torchao_int8wo(c, out);
  const auto& w = linear_q_weight<Int4Weight>(c, "torchao_int4wo", [](const Int4Weight&) { return false; });
  const auto parts = w.tensor_data();  // qdata, scale, zero_point
  const Tensor q = parts.at(0).second.contiguous(), scale = parts.at(1).second.contiguous(),
               zero = parts.at(2).second.contiguous();
  const DType sd = scale.dtype();
  check(sd == zero.dtype() && (sd == DType::f32 || sd == DType::bf16 || sd == DType::f16), "linear_q",
        "cuda: torchao_int4wo scale ", scale.str(), " and zero_point ", zero.str(),
        " must share one of float32, bfloat16, float16");
  out = dequantize_then_linear(c, "torchao_int4wo", {&q, &scale, &zero}, [&](Tensor& wd) {
    dequant_torchao_int4(static_cast<const uint8_t*>(q.data_ptr()), scale.data_ptr(), zero.data_ptr(), scale.dtype(),
                         wd.size(0), wd.size(1), w.group_size(), wd.data_ptr(), wd.dtype(), wd.device().index);
  });
}

// Int8DynamicActivationInt8WeightConfig: the activations quantized per token (or per tensor) on the device,
// cuBLASLt's int8 x int8 -> int32 GEMM (IMMA), then torchao's epilogue: round(x dtype, c * x_scale) * w_scale
// + bias, in x's dtype (the CPU's int8_dynamic_linear, value for value).
void torchao_int8dq(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<AffineInt8Weight>(c, "torchao_int8dq",
                                                    [](const AffineInt8Weight& a) { return !a.act_granularity().has_value(); });
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const int64_t N = w.shape()[0], K = w.shape()[1], M = K ? x.numel() / K : 0;
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "linear_q",
        "cuda: torchao_int8dq input ", x.str(), " is not float32, bfloat16 or float16");
  check(w.block_cols() == K, "linear_q", "cuda: torchao_int8dq needs a per-row or per-tensor weight scale, got block [",
        w.block_rows(), ", ", w.block_cols(), "]");
  for (int64_t j = 0; j < N; j += w.block_rows())
    check(w.zero_at(j, 0) == 0, "linear_q", "cuda: torchao_int8dq weight row ", j, " has zero_point ", w.zero_at(j, 0),
          " (the dynamic int8 linear needs a symmetric weight)");
  const Tensor qw = w.qdata().contiguous(), ws = w.scale().contiguous(), xc = x.contiguous();
  for (const Tensor* t : {&qw, &ws})
    check(t->device() == x.device(), "linear_q", "cuda: the torchao_int8dq weight is on ", t->device().str(), ", x on ",
          x.device().str());
  check(ws.dtype() == DType::f32 || ws.dtype() == DType::bf16 || ws.dtype() == DType::f16, "linear_q",
        "cuda: torchao_int8dq weight scale of ", ws.str());
  const bool per_tensor = w.act_granularity()->type == quant::torchao::Granularity::PerTensor;
  const Device d = x.device();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  out = Tensor::empty(out_shape, x.dtype(), d);
  if (M == 0 || N == 0) return;
  const Tensor q = Tensor::empty({M, K}, DType::i8, d), xs = Tensor::empty({per_tensor ? 1 : M}, DType::f32, d);
  const Tensor minmax = per_tensor ? Tensor::empty({2 * M}, DType::f32, d) : Tensor();
  const Tensor acc = Tensor::empty({M, N}, DType::i32, d);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  DeviceGuard guard(d.index);
  int8_quantize_activations(xc.data_ptr(), xc.dtype(), M, K, per_tensor, x.dtype(), static_cast<int8_t*>(q.data_ptr()),
                            static_cast<float*>(xs.data_ptr()),
                            per_tensor ? static_cast<float*>(minmax.data_ptr()) : nullptr, d.index);
  gemm_s8s8_s32(d.index, static_cast<const int8_t*>(q.data_ptr()), static_cast<const int8_t*>(qw.data_ptr()),
                static_cast<int32_t*>(acc.data_ptr()), M, N, K);
  int8dq_epilogue(static_cast<const int32_t*>(acc.data_ptr()), static_cast<const float*>(xs.data_ptr()), per_tensor,
                  ws.data_ptr(), ws.dtype(), w.block_rows(), b.defined() ? b.data_ptr() : nullptr,
                  b.defined() ? b.dtype() : DType::f32, M, N, out.data_ptr(), out.dtype(), d.index);
}

// The fast path of fp8dq: x's float8 codes (per row or tensor scales, as below) and W's e4m3fn codes on
// cuBLASLt's float8 GEMM (f32 out, unit scales), then acc * x_scale * w_scale (+ bias) rounded to x's dtype.
// For bfloat16 / float16 activations (float32 ones keep the exact path below: the f32 parity of the op
// table), e4m3fn weights with one scale per row (or per tensor), N and K multiples of 16, on a GPU with
// fp8 tensor cores; false (nothing written) otherwise.
bool float8dq_on_fp8_gemm(const Float8Weight& w, const Tensor& xc, const Tensor& bias, bool per_tensor, Tensor& out) {
  const Tensor& q = w.qdata();
  const int64_t N = w.shape()[0], K = w.shape()[1], M = K ? xc.numel() / K : 0;
  if (xc.dtype() == DType::f32 || q.dtype() != DType::f8_e4m3fn || w.block_cols() != K || M == 0) return false;
  const Device d = xc.device();
  const Tensor qc = packed_operand(q, q.dtype()), ws = w.scale().contiguous();
  if (ws.dtype() != DType::f32) return false;
  const Tensor codes = Tensor::empty({M, K}, DType::u8, d), acc = Tensor::empty({M, N}, DType::f32, d);
  const Tensor xs = Tensor::empty({per_tensor ? 1 : M}, DType::f32, d);
  const Tensor amax = per_tensor ? Tensor::empty({M}, DType::f32, d) : Tensor();
  DeviceGuard guard(d.index);
  fp8_quantize_activation_codes(xc.data_ptr(), xc.dtype(), M, K, per_tensor, xc.dtype(), static_cast<float*>(xs.data_ptr()),
                                per_tensor ? static_cast<float*>(amax.data_ptr()) : nullptr,
                                static_cast<uint8_t*>(codes.data_ptr()), d.index);
  if (!gemm_e4m3_f32(d.index, static_cast<const uint8_t*>(codes.data_ptr()), static_cast<const uint8_t*>(qc.data_ptr()),
                     static_cast<float*>(acc.data_ptr()), M, N, K)
           .empty())
    return false;
  Shape os = xc.shape();
  os.back() = N;
  out = Tensor::empty(os, xc.dtype(), d);
  fp8dq_epilogue(static_cast<const float*>(acc.data_ptr()), static_cast<const float*>(xs.data_ptr()), per_tensor,
                 static_cast<const float*>(ws.data_ptr()), w.block_rows(), bias.defined() ? bias.data_ptr() : nullptr,
                 bias.defined() ? bias.dtype() : DType::f32, M, N, out.data_ptr(), out.dtype(), d.index);
  return true;
}

// Float8DynamicActivationFloat8WeightConfig (e4m3fn activations): the CPU's computation of _scaled_mm,
// value for value up to the GEMM's summation order. On cuBLASLt's float8 GEMM where it can run
// (float8dq_on_fp8_gemm); else x quantized per row (or tensor) to float8 and back on the device, W's
// float8 codes times their scales in f32, an f32 GEMM with the bias, one rounding to x's dtype.
void torchao_float8dq(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<Float8Weight>(c, "torchao_float8dq",
                                                [](const Float8Weight& a) { return !a.dynamic_activation(); });
  const quant::torchao::Float8ActQuant& act = *w.act_quant();
  check(act.float8 == DType::f8_e4m3fn, "linear_q", "cuda: torchao_float8dq with ", dtype_name(act.float8),
        " activations has no CUDA kernel (float8_e4m3fn has)");
  const Tensor& x = c.inputs[0];
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, "linear_q",
        "cuda: torchao_float8dq input ", x.str(), " is not float32, bfloat16 or float16");
  const Tensor q = w.qdata().contiguous(), scale = w.scale().contiguous(), xc = x.contiguous();
  check(scale.dtype() == DType::f32, "linear_q", "cuda: the torchao_float8dq scale is ", scale.str(), ", not float32");
  const int64_t K = w.shape()[1], M = K ? x.numel() / K : 0;
  const bool per_tensor = act.granularity.type == quant::torchao::Granularity::PerTensor;
  const Device d = x.device();
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  if (float8dq_on_fp8_gemm(w, xc, bias.defined() ? bias.contiguous() : bias, per_tensor, out)) return;
  Float8Table e4m3, wt;
  for (int i = 0; i < 256; ++i) {
    e4m3.v[i] = f8_e4m3fn_to_f32(uint8_t(i));
    wt.v[i] = q.dtype() == DType::f8_e5m2 ? f8_e5m2_to_f32(uint8_t(i)) : e4m3.v[i];
  }
  const Tensor xq = Tensor::empty(x.shape(), DType::f32, d), xs = Tensor::empty({per_tensor ? 1 : std::max<int64_t>(M, 1)}, DType::f32, d);
  const Tensor amax = per_tensor ? Tensor::empty({std::max<int64_t>(M, 1)}, DType::f32, d) : Tensor();
  {
    DeviceGuard guard(d.index);
    fp8_fake_quantize_activations(xc.data_ptr(), xc.dtype(), M, K, per_tensor, x.dtype(), e4m3,
                                  static_cast<float*>(xs.data_ptr()),
                                  per_tensor ? static_cast<float*>(amax.data_ptr()) : nullptr,
                                  static_cast<float*>(xq.data_ptr()), d.index);
  }
  const Tensor y = dequantize_then_linear(c, "torchao_float8dq", {&q, &scale}, xq, c.inputs.size() > 1 ? c.inputs[1] : Tensor(),
                                          [&](Tensor& wd) {
                                            dequant_float8(static_cast<const uint8_t*>(q.data_ptr()), wt,
                                                           static_cast<const float*>(scale.data_ptr()), wd.size(0),
                                                           wd.size(1), w.block_rows(), w.block_cols(), DType::f32,
                                                           wd.data_ptr(), wd.dtype(), wd.device().index);
                                          });
  out = y.dtype() == x.dtype() ? y : y.to(x.dtype());
}

}  // namespace

void register_linear_q_torchao_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int8dq", torchao_int8dq);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_float8dq", torchao_float8dq);
  for (const char* s : {"torchao_int1wo", "torchao_int2wo", "torchao_int3wo", "torchao_int5wo", "torchao_int6wo",
                        "torchao_int7wo"})  // IntxWeightOnlyConfig: codes one per int8, as int8wo
    ops::register_linear_q_kernel(DeviceKind::cuda, s, torchao_int8wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int4wo", torchao_int4wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int8wo", torchao_int8wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_float8wo", torchao_float8wo);
}

}  // namespace diffq::backend::cuda
