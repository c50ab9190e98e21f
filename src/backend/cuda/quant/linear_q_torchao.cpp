// linear_q on CUDA for torchao's weight-only schemes: int8 (Int8WeightOnlyConfig: Int8Tensor without
// activation quantization; dequantized into the activation's dtype as torchao's dequantize(x.dtype)) and
// float8 (Float8WeightOnlyConfig: Float8Tensor; dequantized as dequantize() rounds, to the weight's own
// dtype, held in the activation's), then the dense cuBLASLt GEMM with f32 accumulation (dequant_kernels.cu).
// The dequantized weight lives for the one call: the caching allocator hands the same block to the next
// layer of that size, so it is a buffer reused across layers, not a second copy of the model.
// (torch's int8 x int8 GEMM is slower than bf16 on the H200, ../shared/peers/h200-diffq.md; IMMA against
// this path is the measurement issue 37 asks for.)
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"
#include "ops/linear_q.h"
#include "quant/torchao/affine_int8_weight.h"
#include "quant/torchao/float8_weight.h"

namespace diffq::backend::cuda {

namespace {

using quant::torchao::AffineInt8Weight;

void torchao_int8wo(const OpCall& c, Tensor& out) {
  const auto* w = dynamic_cast<const AffineInt8Weight*>(c.attrs.packed);
  check(w != nullptr && !w->act_granularity(), "linear_q", "cuda: the torchao_int8wo kernel was given a ",
        c.attrs.packed->scheme(), " weight");
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const Shape ws = w->shape();
  const int idx = x.device().index;
  const Tensor q = w->qdata().contiguous(), scale = w->scale().contiguous(), zp = w->zero_point().contiguous();
  check(q.device() == x.device() && scale.device() == x.device() && zp.device() == x.device(), "linear_q",
        "cuda: the torchao_int8wo weight is on ", q.device().str(), ", x on ", x.device().str());
  Tensor wd = Tensor::empty(ws, x.dtype(), x.device());
  {
    DeviceGuard guard(idx);
    dequant_affine_int8(static_cast<const int8_t*>(q.data_ptr()), scale.data_ptr(), scale.dtype(),
                        static_cast<const int8_t*>(zp.data_ptr()), ws[0], ws[1], w->block_rows(), w->block_cols(),
                        wd.data_ptr(), x.dtype(), idx);
  }
  out = ops::execute(OpCall{OpKind::linear, {x, wd, bias}, {}});
}

void torchao_float8wo(const OpCall& c, Tensor& out) {
  const auto* w = dynamic_cast<const quant::torchao::Float8Weight*>(c.attrs.packed);
  check(w != nullptr && !w->dynamic_activation(), "linear_q", "cuda: the torchao_float8wo kernel was given a ",
        c.attrs.packed->scheme(), " weight");
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const Shape ws = w->shape();
  const int idx = x.device().index;
  const Tensor q = w->qdata().contiguous(), scale = w->scale().contiguous();
  check(q.device() == x.device() && scale.device() == x.device() && scale.dtype() == DType::f32, "linear_q",
        "cuda: the torchao_float8wo weight is on ", q.device().str(), " (scale ", scale.str(), "), x on ", x.device().str());
  Float8Table table;
  for (int i = 0; i < 256; ++i)
    table.v[i] = q.dtype() == DType::f8_e5m2 ? f8_e5m2_to_f32(uint8_t(i)) : f8_e4m3fn_to_f32(uint8_t(i));
  Tensor wd = Tensor::empty(ws, x.dtype(), x.device());
  {
    DeviceGuard guard(idx);
    dequant_float8(static_cast<const uint8_t*>(q.data_ptr()), table, static_cast<const float*>(scale.data_ptr()), ws[0],
                   ws[1], w->block_rows(), w->block_cols(), w->dtype(), wd.data_ptr(), x.dtype(), idx);
  }
  out = ops::execute(OpCall{OpKind::linear, {x, wd, bias}, {}});
}

}  // namespace

void register_linear_q_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int8wo", torchao_int8wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_float8wo", torchao_float8wo);
}

}  // namespace diffq::backend::cuda
