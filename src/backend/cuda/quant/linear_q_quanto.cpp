// linear_q on CUDA for optimum-quanto weights (quanto_int8, quanto_float8, quanto_int4, quanto_int2): quanto's
// dequantize() element by element in the weight's dtype (blockq::quanto_value), rounded to x's dtype as the
// CPU's tile plan rounds it, into a buffer of x's dtype; then the dense cuBLASLt linear with the call's bias.
#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "backend/cuda/quant/scheme_params.h"
#include "quant/quanto/quanto.h"

namespace diffq::backend::cuda {

namespace {

using quant::QuantoQType;
using quant::QuantoWeight;

void quanto_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<QuantoWeight>(c, "quanto", [](const QuantoWeight&) { return false; });
  const int64_t N = w.shape()[0];
  const blockq::QuantoParams p = quanto_params(w);
  const Tensor data = w.data().contiguous(), scale = w.scale().contiguous();
  const Tensor shift = p.bits == 8 ? Tensor() : w.shift().contiguous();
  check(scale.dtype() == p.dtype && (!shift.defined() || shift.dtype() == p.dtype), "linear_q", "cuda: quanto scale ",
        scale.str(), " is not in the weight's dtype ", dtype_name(p.dtype));
  Float8Table f8{};
  if (p.float8)
    for (int i = 0; i < 256; ++i) f8.v[i] = f8_e4m3fn_to_f32(uint8_t(i));
  const Tensor& x = c.inputs[0];
  const std::initializer_list<const Tensor*> packed =
      shift.defined() ? std::initializer_list<const Tensor*>{&data, &scale, &shift}
                      : std::initializer_list<const Tensor*>{&data, &scale};
  out = dequantize_then_linear(c, "quanto", packed, [&](Tensor& wd) {
    dequant_quanto(p, static_cast<const uint8_t*>(data.data_ptr()), scale.data_ptr(),
                   shift.defined() ? shift.data_ptr() : nullptr, f8, N, x.dtype(), wd.data_ptr(), wd.dtype(),
                   wd.device().index);
  });
}

}  // namespace

void register_linear_q_quanto_kernels() {
  for (const char* s : {"quanto_int8", "quanto_float8", "quanto_int4", "quanto_int2"})
    ops::register_linear_q_kernel(DeviceKind::cuda, s, quanto_linear);
}

}  // namespace diffq::backend::cuda
