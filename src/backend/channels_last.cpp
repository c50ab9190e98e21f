#include "backend/channels_last.h"

#include "ops/ops.h"

namespace diffq::backend {

void run_channels_first(const ops::OpCall& c, Tensor& out, ops::KernelFn channels_first) {
  ops::OpCall first = c;
  first.attrs.i1 = int64_t(ops::ImageLayout::channels_first);
  first.inputs[0] = ops::to_channels_first(c.inputs[0]);
  if (first.inputs.size() > 3 && first.inputs[3].defined()) first.inputs[3] = ops::to_channels_first(c.inputs[3]);
  Tensor tmp = Tensor::empty(ops::infer(first).shape, out.dtype(), out.device());
  channels_first(first, tmp);
  ops::execute_into({ops::OpKind::copy, {ops::channels_last_view(tmp)}, {}}, out);  // [N, C, ...] -> [N, ..., C]
}

}  // namespace diffq::backend
