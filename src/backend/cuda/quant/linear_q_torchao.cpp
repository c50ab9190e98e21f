// linear_q on CUDA for torchao's weight-only schemes: int4 (Int4WeightOnlyConfig), int8 (Int8WeightOnlyConfig: Int8Tensor without
// activation quantization; dequantized into the activation's dtype as torchao's dequantize(x.dtype)) and
// float8 (Float8WeightOnlyConfig: Float8Tensor; dequantized as dequantize() rounds, to the weight's own
// dtype, held in the activation's), then the dense cuBLASLt GEMM with f32 accumulation (dequant_kernels.cu).
// (torch's int8 x int8 GEMM is slower than bf16 on the H200, ../shared/peers/h200-diffq.md; IMMA against
// this path is the measurement issue 37 asks for.)
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
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

}  // namespace

void register_linear_q_torchao_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int4wo", torchao_int4wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int8wo", torchao_int8wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_float8wo", torchao_float8wo);
}

}  // namespace diffq::backend::cuda
