#include "backend/cpu/quant/dequant_rows.h"

#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/quant/bnb_4bit_dequant.h"
#include "backend/cpu/quant/gguf_dequant.h"
#include "backend/cpu/quant/torchao_int4_dequant.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/torchao/int4_weight.h"

namespace diffq::backend::cpu {

namespace {

// Rounds n values through a 16-bit dtype with the SIMD row converters (torch's rounding, as round_through).
void round_through_16bit(float* v, DType dt, int64_t n) {
  if (dt != DType::bf16 && dt != DType::f16) return;
  static thread_local std::vector<uint16_t> half;
  half.resize(size_t(n));
  store_f32(v, half.data(), dt, n);
  load_f32(half.data(), dt, 1, v, n);
}

}  // namespace

void bnb_4bit_dequant_rows(const quant::Bnb4bitWeight& w, int64_t n0, int64_t n1, float* dst, DType round_to) {
  const int64_t K = w.shape()[1], bs = w.state().blocksize;
  const int64_t e0 = n0 * K, e1 = n1 * K;
  if (e1 <= e0) return;
  const int64_t b0 = e0 / bs, b1 = (e1 - 1) / bs + 1;
  static thread_local std::vector<float> am;
  am.resize(size_t(b1 - b0));
  w.absmax_range(b0, b1, am.data());
  const Tensor& packed = w.packed();
  dequant_4bit_range(static_cast<const uint8_t*>(packed.data_ptr()), int64_t(packed.nbytes()), w.pair_table(),
                     am.data(), b0, bs, e0, e1, dst);
  round_through_16bit(dst, round_to, e1 - e0);
}

void gguf_dequant_rows(const quant::GGUFQuantizedWeight& w, int64_t n0, int64_t n1, float* dst) {
  if (n1 <= n0) return;
  const int64_t n = (n1 - n0) * w.shape()[1];
  const auto* p = static_cast<const uint8_t*>(w.data().data_ptr());
  gguf_dequantizer(w.type())(p + n0 * w.row_bytes(), dst, n);  // rows are contiguous whole blocks
  round_through_16bit(dst, w.compute_dtype(), n);
}

void torchao_int4_dequant_rows(const quant::torchao::Int4Weight& w, int64_t n0, int64_t n1, float* dst) {
  const int64_t K = w.shape()[1], g = w.group_size(), kg = K / g;
  const auto* q = static_cast<const uint8_t*>(w.qdata().data_ptr());
  for (int64_t r = n0; r < n1; ++r)
    dequant_int4_row(q + r * (K / 2), K, g, w.scale_nk().data() + r * kg, w.zero_nk().data() + r * kg,
                     dst + (r - n0) * K);
}

std::optional<quant::TileLinearPlan> cpu_tile_linear_plan(const QuantizedWeight& w, const Tensor& x,
                                                          const Tensor& bias) {
  std::optional<quant::TileLinearPlan> plan = w.tile_linear_plan(x, bias);
  if (!plan) return plan;
  if (const auto* b = dynamic_cast<const quant::Bnb4bitWeight*>(&w)) {
    // the plan's rows round to the compute dtype (Linear4bit dequantizes straight to it)
    plan->dequant_rows = [b, dt = b->compute_dtype()](int64_t n0, int64_t n1, float* dst) {
      bnb_4bit_dequant_rows(*b, n0, n1, dst, dt);
    };
  } else if (const auto* g = dynamic_cast<const quant::GGUFQuantizedWeight*>(&w)) {
    plan->dequant_rows = [g](int64_t n0, int64_t n1, float* dst) { gguf_dequant_rows(*g, n0, n1, dst); };
  } else if (const auto* i4 = dynamic_cast<const quant::torchao::Int4Weight*>(&w)) {
    plan->dequant_rows = [i4](int64_t n0, int64_t n1, float* dst) { torchao_int4_dequant_rows(*i4, n0, n1, dst); };
  }
  return plan;
}

}  // namespace diffq::backend::cpu
