// A Linear weight stored as GGUF (ggml) blocks: the scheme "gguf_<type>" ("gguf_q4_k", "gguf_q8_0",
// ...). The [N, K] weight is N rows of K / block_size blocks, exactly the bytes of a GGUF tensor with
// ne = [K, N], so loading from a GGUF file is zero-copy (the bytes stay in the mapping) and saving
// writes them back unchanged.
//
// Its linear dequantizes a tile of rows at a time straight into the GEMM (tile_linear_plan; on the CPU
// with SIMD row dequantizers bit-identical to the reference, backend/cpu/quant); the full-precision
// weight is never materialised.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "diffq/tensor.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "quant/gguf/gguf_quants.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

// The user's choice. Diffusers' GGUFQuantizationConfig has only compute_dtype (default float32);
// the block type is diffq's addition for quantizing (Diffusers only loads pre-quantized files).
struct GGUFQuantizationConfig {
  gguf::GGMLType type = gguf::GGMLType::Q4_K;
  // The dtype the weight is rounded to before the matmul, as Diffusers' GGUFLinear does with
  // weight.to(compute_dtype): f32 (no rounding), bf16 or f16.
  DType compute_dtype = DType::f32;

  // Accepts {"type": "q4_K"} and/or Diffusers' kwargs {"compute_dtype": "bfloat16"} (also "torch.bfloat16",
  // "bf16", "float16", "float32"); {"quant_method": "gguf"} is allowed; other keys are ignored.
  static GGUFQuantizationConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;  // {"quant_method":"gguf","type":"Q4_K","compute_dtype":"float32"}
  std::string scheme() const;      // "gguf_q4_k"
};

class GGUFQuantizedWeight : public QuantizedWeight {
 public:
  // True when `shape` is a 2-D [N, K] weight whose K is a whole number of `type` blocks.
  static bool should_quantize(const Shape& shape, gguf::GGMLType type);
  static bool should_quantize(const Shape& shape, const GGUFQuantizationConfig& cfg) {
    return should_quantize(shape, cfg.type);
  }

  // Quantizes a dense [N, K] weight (f32/bf16/f16, any layout) with ggml's reference quantizer.
  // `name` only appears in error messages.
  static std::shared_ptr<GGUFQuantizedWeight> quantize(const Tensor& w, const GGUFQuantizationConfig& cfg,
                                                       std::string_view name = "weight");

  // Wraps a GGUF tensor's raw bytes (1-D uint8 on the CPU, kept alive, not copied): ggml type id and
  // torch-order shape [N, K]. Throws, naming the tensor, on an unsupported type, a shape that is not
  // 2-D or whose K is not a multiple of the block size, or a byte count that does not match.
  static std::shared_ptr<GGUFQuantizedWeight> load(std::string_view name, const Tensor& raw, uint32_t ggml_type,
                                                   const Shape& shape, DType compute_dtype = DType::f32);
  static std::shared_ptr<GGUFQuantizedWeight> load(const io::GGUFFile& file, std::string_view name,
                                                   DType compute_dtype = DType::f32);

  // Rows [n0, n1) as a weight of their own, sharing the bytes (blocks run along rows, so a row range
  // is a byte range): how BFL's fused qkv / linear1 tensors are split into Diffusers' to_q/k/v.
  std::shared_ptr<GGUFQuantizedWeight> rows(int64_t n0, int64_t n1) const;

  // The GGUF tensor that stores this weight (for io::write_gguf); its bytes are shared, not copied.
  io::GGUFWriteTensor save(std::string name) const;

  std::string scheme() const override;
  Shape shape() const override { return {N_, K_}; }
  // f32 values bit-exact with gguf-py's gguf.quants.dequantize, then cast to `dtype`.
  Tensor dequantize(DType dtype) const override;
  std::vector<Tensor> storage_tensors() const override { return {data_}; }
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) as f32 (rounded through compute_dtype when that is bf16/f16), K per row: the reference.
  void dequant_rows(int64_t n0, int64_t n1, float* dst) const;

  gguf::GGMLType type() const { return traits_->type; }
  const gguf::TypeTraits& traits() const { return *traits_; }
  DType compute_dtype() const { return compute_dtype_; }
  const Tensor& data() const { return data_; }  // [N * row_bytes] uint8
  int64_t row_bytes() const { return row_bytes_; }

 private:
  GGUFQuantizedWeight(const gguf::TypeTraits& t, Tensor data, int64_t N, int64_t K, DType compute_dtype);
  const gguf::TypeTraits* traits_;
  Tensor data_;
  int64_t N_, K_, row_bytes_;
  DType compute_dtype_;
};

}  // namespace diffq::quant
