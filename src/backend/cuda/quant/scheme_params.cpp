#include "backend/cuda/quant/scheme_params.h"

namespace diffq::backend::cuda {

blockq::QuantoParams quanto_params(const quant::QuantoWeight& w) {
  const int64_t N = w.shape()[0], K = w.shape()[1];
  blockq::QuantoParams p;
  p.dtype = w.dtype();
  p.in_features = K;
  p.float8 = w.qtype() == quant::QuantoQType::float8;
  p.bits = w.qtype() == quant::QuantoQType::int4 ? 4 : w.qtype() == quant::QuantoQType::int2 ? 2 : 8;
  if (p.bits == 8) {
    p.scalar_scale = w.scale().numel() == 1 && N > 1;
    return p;
  }
  p.group_cols = w.group_size().value_or(K);
  const int64_t groups = N * K / p.group_cols, per_byte = 8 / p.bits;
  p.packed_rows = (groups + per_byte - 1) / per_byte;
  p.scalar_scale = w.scale().numel() == 1 && groups > 1;
  p.scalar_shift = w.shift().numel() == 1 && groups > 1;
  return p;
}

blockq::SdnqParams sdnq_params(const quant::sdnq::SdnqWeight& w) {
  const quant::sdnq::SdnqDtype& d = w.dtype_traits();
  blockq::SdnqParams p;
  p.bits = d.bits;
  p.min = int(d.min);
  p.is_unsigned = d.is_unsigned;
  p.is_packed = d.is_packed;
  p.storage = d.storage == DType::i8 ? 0 : d.storage == DType::u8 ? 1 : 2;
  p.scale_dtype = w.scale_dtype();
  p.in_features = w.shape()[1];
  p.groups = w.groups_per_row();
  return p;
}

blockq::AutoRoundParams autoround_params(const quant::autoround::AutoRoundWeight& w) {
  const std::vector<Tensor> st = w.storage_tensors();  // qweight, qzeros, scales[, g_idx]
  blockq::AutoRoundParams p;
  p.bits = w.layout().bits;
  p.zero_minus_one = w.layout().zero_minus_one;
  p.N = w.shape()[0];
  p.K = w.shape()[1];
  p.group_size = w.layout().group_size == -1 ? p.K : w.layout().group_size;
  p.g_idx = st.size() < 4 ? 0 : st[3].dtype() == DType::i32 ? 4 : 8;
  p.scale_dtype = st.at(2).dtype();
  return p;
}

}  // namespace diffq::backend::cuda
