// linear_q on CUDA for torchao's weight-only schemes: int8 (Int8WeightOnlyConfig: Int8Tensor without
// activation quantization; dequantized into the activation's dtype as torchao's dequantize(x.dtype)) and
// float8 (Float8WeightOnlyConfig: Float8Tensor; dequantized as dequantize() rounds, to the weight's own
// dtype, held in the activation's), then the dense cuBLASLt GEMM with f32 accumulation (dequant_kernels.cu).
// The dequantized weight lives for the one call: the caching allocator hands the same block to the next
// layer of that size, so it is a buffer reused across layers, not a second copy of the model.
// (torch's int8 x int8 GEMM is slower than bf16 on the H200, ../shared/peers/h200-diffq.md; IMMA against
// this path is the measurement issue 37 asks for.)
#include <initializer_list>

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
using quant::torchao::Float8Weight;

// The weight of a call as its scheme's class, checked (a scheme name registered for another class, or the
// dynamic-activation variant of the same class, is refused rather than misread).
template <class W, class Dynamic>
const W& weight_of(const OpCall& c, const char* scheme, Dynamic&& dynamic) {
  const auto* w = dynamic_cast<const W*>(c.attrs.packed);
  check(w != nullptr && !dynamic(*w), "linear_q", "cuda: the ", scheme, " kernel was given a ", c.attrs.packed->scheme(),
        " weight");
  return *w;
}

// Every kernel here: W [N, K] dequantized by `fill(wd)` into a buffer of x's dtype on x's device (the packed
// tensors must live there too), then the dense linear (cuBLASLt) with the call's bias.
template <class Fill>
Tensor dequantize_then_gemm(const OpCall& c, const char* scheme, std::initializer_list<const Tensor*> packed, Fill&& fill) {
  const Tensor& x = c.inputs[0];
  for (const Tensor* t : packed)
    check(t->device() == x.device(), "linear_q", "cuda: the ", scheme, " weight is on ", t->device().str(), ", x on ",
          x.device().str());
  Tensor wd = Tensor::empty(c.attrs.packed->shape(), x.dtype(), x.device());
  {
    DeviceGuard guard(x.device().index);
    fill(wd);
  }
  return ops::execute(OpCall{OpKind::linear, {x, wd, c.inputs.size() > 1 ? c.inputs[1] : Tensor()}, {}});
}

void torchao_int8wo(const OpCall& c, Tensor& out) {
  const auto& w = weight_of<AffineInt8Weight>(c, "torchao_int8wo",
                                             [](const AffineInt8Weight& a) { return a.act_granularity().has_value(); });
  const Tensor q = w.qdata().contiguous(), scale = w.scale().contiguous(), zp = w.zero_point().contiguous();
  out = dequantize_then_gemm(c, "torchao_int8wo", {&q, &scale, &zp}, [&](Tensor& wd) {
    dequant_affine_int8(static_cast<const int8_t*>(q.data_ptr()), scale.data_ptr(), scale.dtype(),
                        static_cast<const int8_t*>(zp.data_ptr()), wd.size(0), wd.size(1), w.block_rows(),
                        w.block_cols(), wd.data_ptr(), wd.dtype(), wd.device().index);
  });
}

void torchao_float8wo(const OpCall& c, Tensor& out) {
  const auto& w = weight_of<Float8Weight>(c, "torchao_float8wo", [](const Float8Weight& a) { return a.dynamic_activation(); });
  const Tensor q = w.qdata().contiguous(), scale = w.scale().contiguous();
  check(scale.dtype() == DType::f32, "linear_q", "cuda: the torchao_float8wo scale is ", scale.str(), ", not float32");
  Float8Table table;
  for (int i = 0; i < 256; ++i)
    table.v[i] = q.dtype() == DType::f8_e5m2 ? f8_e5m2_to_f32(uint8_t(i)) : f8_e4m3fn_to_f32(uint8_t(i));
  out = dequantize_then_gemm(c, "torchao_float8wo", {&q, &scale}, [&](Tensor& wd) {
    dequant_float8(static_cast<const uint8_t*>(q.data_ptr()), table, static_cast<const float*>(scale.data_ptr()),
                   wd.size(0), wd.size(1), w.block_rows(), w.block_cols(), w.dtype(), wd.data_ptr(), wd.dtype(),
                   wd.device().index);
  });
}

}  // namespace

void register_linear_q_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_int8wo", torchao_int8wo);
  ops::register_linear_q_kernel(DeviceKind::cuda, "torchao_float8wo", torchao_float8wo);
}

}  // namespace diffq::backend::cuda
