#include "backend/cpu/compile/placed_linear.h"

#include "backend/cpu/linear.h"
#include "compile/passes.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

void run_linear_strided(const std::vector<Tensor>& inputs, Tensor& out) {
  const int64_t ld = compile::uniform_row_stride(out.shape(), out.strides());
  check(ld >= 0 && (out.dtype() == DType::f32 || out.dtype() == DType::bf16 || out.dtype() == DType::f16), "compile",
        "a linear placed in a concat needs float rows with one stride, got ", out.str());
  const DType dt = out.dtype();
  if (out.numel() == 0) return;
  auto* base = static_cast<uint8_t*>(out.data_ptr());
  const int64_t es = int64_t(dtype_size(dt));
  GemmParts parts;
  parts.begin = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* pld) -> float* {
    if (dt == DType::f32) {
      *pld = ld;
      return reinterpret_cast<float*>(base) + r0 * ld + c0;
    }
    thread_local std::vector<float> tile;
    tile.resize(size_t((r1 - r0) * (c1 - c0)));
    *pld = c1 - c0;
    return tile.data();
  };
  parts.end = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t pld) {
    if (dt == DType::f32) return;
    for (int64_t r = r0; r < r1; ++r) {
      auto* row = reinterpret_cast<uint16_t*>(base + (r * ld + c0) * es);
      const float* src = part + (r - r0) * pld;
      for (int64_t c = 0; c < c1 - c0; ++c) row[c] = dt == DType::bf16 ? f32_to_bf16(src[c]) : f32_to_f16(src[c]);
    }
  };
  const Tensor bias = inputs.size() > 2 ? inputs[2] : Tensor();
  linear_parts(inputs[0], inputs[1], bias, parts);
}

}  // namespace diffq::backend::cpu
