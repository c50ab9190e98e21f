// Dense bf16 linear weights packed once for oneDNN's bf16 GEMM (ops/weight_packing.h): the weight's
// B operand (W^T) in oneDNN's blocked layout (onednn_gemm.h: onednn_pack_bf16_weight), which its brgemm
// otherwise copies W into on every call. The packed form replaces the dense one in its Parameter (one
// copy); dequantize() gives the dense weight back exactly. Its linear_q kernel computes what the bf16
// linear kernel computes on the dense weight (oneDNN, bias and one rounding inside the primitive; the large
// linears on AMX on diffq's tiles, gemm.h: packed_bf16_uses_amx, the same up to the f32 summation order).
#pragma once

#include <memory>
#include <string>

#include "ops/packed_weight.h"

namespace diffq::backend::cpu {

inline constexpr const char* kPackedBf16Scheme = "cpu_onednn_bf16_blocked";

class PackedBf16Weight : public ops::PackedWeight {
 public:
  // w: a CPU bf16 [N, K] matrix with unit column stride.
  explicit PackedBf16Weight(const Tensor& w);
  std::string scheme() const override { return kPackedBf16Scheme; }
  Shape shape() const override { return {n_, k_}; }
  Tensor dequantize(DType dtype) const override;  // the dense [N, K] weight (bf16: bit-exact), as dtype
  std::vector<Tensor> storage_tensors() const override { return {packed_}; }
  const uint16_t* data() const { return packed_.data<uint16_t>(); }

 private:
  int64_t n_ = 0, k_ = 0;
  Tensor packed_;  // bf16 [onednn_packed_bf16_elems(N, K)]
};

// Whether the CPU packs a dense weight w for the linear of x_dtype inputs under the current tuning (tuning.h:
// WeightPacking): both bf16 on the CPU, W a matrix of >= 16 rows and columns with unit column stride,
// oneDNN able to read packed weights natively, and packing `on`, or `best` where oneDNN is the bf16 GEMM
// (gemm_bf16_uses_onednn: AMX, AMD with AVX512-BF16, or DIFFQ_GEMM_KERNEL=onednn).
bool cpu_packs_linear_weight(const Tensor& w, DType x_dtype);

// What happens to dense bf16 linear weights here under the current tuning, in words (`diffq info`):
// "packed once for oneDNN (BA16a64b2a) at their first bf16 linear", or why not.
std::string weight_packing_description();

// Registers the packer (ops::register_weight_packer) and the scheme's linear_q kernel.
void register_packed_linear_weight();

}  // namespace diffq::backend::cpu
