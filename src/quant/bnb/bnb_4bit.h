// bitsandbytes 4-bit weights (Linear4bit / Params4bit, NF4 and FP4, optional double quant), bit-exact
// with bitsandbytes 0.50.2 on the CPU:
//  * quantize = bnb.functional.quantize_4bit (its torch "default" kernel, the one the CPU runs):
//    absmax per block of `blocksize` flattened elements; full blocks scale by the reciprocal of
//    absmax (clamped to 1e-38), the trailing partial block divides by its absmax (clamped, and stored
//    clamped); codes = torch.bucketize against the midpoints of the sorted table (ties go down), FP4
//    remapped to its bit-pattern order; two codes per byte, element 2k in the HIGH nibble; an odd
//    element count pads the last low nibble with the code of 0.0.
//  * double quant (compress_statistics): offset = absmax.mean() exactly as torch computes it on the
//    CPU (cascade sum of float32, single thread, `sum_lanes` wide vectors), then libbitsandbytes_cpu's
//    quantize_blockwise of absmax - offset in blocks of 256 against the 8-bit dynamic map (a 65536-bin
//    lookup table of nearest codes).
//  * dequantize = dequantize_4bit: code * absmax in float32 (nested absmax = nested_quant_map[q] *
//    nested_absmax[i / 256] + offset), then one rounding to the dtype. bnb's native CPU kernel (even
//    in_features) has -0.0 at FP4 code 8, its torch fallback (odd in_features) +0.0; diffq does the same.
//  * linear = Linear4bit.forward: bias cast to x's dtype, then x and bias to the compute dtype, the
//    weight dequantized straight to the compute dtype, x W^T + b, the result cast back to x's dtype.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diffq/tensor.h"
#include "io/safetensors.h"
#include "quant/bnb/bnb_config.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

namespace bnb {

enum class QuantType : uint8_t { nf4, fp4 };
std::string_view quant_type_name(QuantType t);
QuantType parse_quant_type(std::string_view s);  // "nf4" / "fp4", else the error bitsandbytes raises

// bnb.functional.get_4bit_type(t): the 16 codes the library saves as weight.quant_map (FP4 in
// bit-pattern order, code 8 = +0.0).
const std::array<float, 16>& code_table(QuantType t);
// The sorted-table midpoints quantize_4bit buckets against, and the FP4 remap (identity for NF4).
const std::array<float, 15>& bucket_bounds(QuantType t);
const std::array<uint8_t, 16>& bucket_to_code(QuantType t);
// create_dynamic_map(): the 256 signed 8-bit dynamic codes of double quant (weight.nested_quant_map).
const std::array<float, 256>& dynamic_map();

bool valid_blocksize(int64_t blocksize);  // 32, 64, ..., 4096 (what quantize_4bit accepts)

// torch.sum of a contiguous float32 vector on the CPU, bit for bit: ATen's cascade sum (4-way ILP,
// 4 levels of 16-step accumulators) over `lanes`-wide vectors (Vectorized<float>::size() of the sum
// kernel: 8 on x86, AVX-512 machines included, as torch dispatches its AVX2 sum there), single-threaded
// (torch splits sums of more than 32768 elements across threads, which changes the bits).
float torch_sum_f32(const float* x, int64_t n, int lanes);
// The lane count torch's CPU sum uses on this machine's architecture (8 on x86, 4 elsewhere).
int torch_sum_lanes_this_cpu();

// Python's repr() of a float (shortest round-trip digits, exponent form below 1e-4 and from 1e16):
// how json.dumps writes nested_offset into the quant_state blob.
std::string python_float_repr(double v);

// libbitsandbytes_cpu quantize_blockwise (float32 input): codes against a sorted 256-entry map
// through its 65536-bin nearest-code lookup table, absmax per block (no clamp; an all-zero block gets
// absmax 0 and code 0).
void quantize_blockwise_8bit(const float* code256, const float* x, int64_t n, int64_t blocksize, uint8_t* out,
                             float* absmax);

}  // namespace bnb

struct Bnb4bitOptions {
  bnb::QuantType quant_type = bnb::QuantType::fp4;  // bitsandbytes' default
  int64_t blocksize = 64;
  bool double_quant = false;              // compress_statistics (bnb_4bit_use_double_quant)
  DType quant_storage = DType::u8;        // dtype the packed bytes are viewed as (bnb_4bit_quant_storage)
  int sum_lanes = 0;                      // torch's vector width for nested_offset; 0 = this CPU's
  DType compute_dtype = DType::f32;       // bnb_4bit_compute_dtype of the Linear4bit

  // From a BitsAndBytesConfig with load_in_4bit (blocksize 64 as Linear4bit uses).
  static Bnb4bitOptions from_config(const BitsAndBytesConfig& c);
};

// bitsandbytes' QuantState of one weight.
struct Bnb4bitState {
  bnb::QuantType quant_type = bnb::QuantType::fp4;
  int64_t blocksize = 64;
  DType dtype = DType::f32;  // dtype of the weight that was quantized (the default dequantize dtype)
  Shape shape;               // [out_features, in_features]
  Tensor absmax;             // float32 [nb], or uint8 [nb] codes with double quant (nb = ceil(n / blocksize))
  // double quant
  bool nested = false;
  Tensor nested_absmax;      // float32 [ceil(nb / 256)]
  Tensor nested_quant_map;   // float32 [256]
  int64_t nested_blocksize = 256;
  float nested_offset = 0.0f;
};

class Bnb4bitWeight : public QuantizedWeight {
 public:
  // `packed` holds (numel + 1) / 2 bytes (any dtype: its bytes are what counts, as bnb's view(uint8)).
  // Throws, naming `name`, when a size does not match the state.
  Bnb4bitWeight(Tensor packed, Bnb4bitState state, DType compute_dtype = DType::f32, std::string name = "weight");

  // quantize_4bit of a dense [O, I] weight (f32, bf16 or f16: bnb's accepted input dtypes).
  static std::shared_ptr<Bnb4bitWeight> quantize(const Tensor& w, const Bnb4bitOptions& opt,
                                                 std::string_view name = "weight");

  // The tensors Diffusers / bitsandbytes save for the Linear weight `weight_key` ("<module>.weight"):
  // the packed codes, "<key>.absmax", "<key>.quant_map", "<key>.nested_absmax",
  // "<key>.nested_quant_map" and "<key>.quant_state.bitsandbytes__nf4|fp4" (UTF-8 JSON). Errors name
  // the key: a missing quant_state blob (Diffusers' message), a missing statistic, a byte count or
  // shape that does not match the state.
  static std::shared_ptr<Bnb4bitWeight> load(const io::StateDict& sd, const std::string& weight_key,
                                             DType compute_dtype = DType::f32);
  // Appends the same tensors (as bitsandbytes' _save_to_state_dict writes them) to `out`.
  void save(io::NamedTensors& out, const std::string& weight_key) const;
  // The quant_state blob's JSON text, byte for byte as bnb's pack_dict_to_tensor (json.dumps).
  std::string quant_state_json() const;

  std::string scheme() const override;  // "bnb_nf4" / "bnb_fp4"
  Shape shape() const override { return state_.shape; }
  Tensor dequantize(DType dtype) const override;  // bit-exact with bnb's dequantize_4bit(..., dtype)
  std::vector<Tensor> storage_tensors() const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) as float32, K per row; `round_to` f32 (none), bf16 or f16 rounds each value as a
  // dequantization to that dtype would: the scalar reference (the CPU's SIMD rows:
  // backend/cpu/quant/dequant_rows.h).
  void dequant_rows(int64_t n0, int64_t n1, float* dst, DType round_to = DType::f32) const;
  // The float32 absmax of every block (double quant decoded), as bnb computes it.
  std::vector<float> absmax_f32() const;
  // The same for blocks [b0, b1) into dst.
  void absmax_range(int64_t b0, int64_t b1, float* dst) const;
  // The 512-float table of both codes of every byte value (bnb::build_pair_table of code()).
  const float* pair_table() const { return pairs_.data(); }

  const Bnb4bitState& state() const { return state_; }
  const Tensor& packed() const { return packed_; }
  DType compute_dtype() const { return compute_dtype_; }
  void set_compute_dtype(DType d);
  const float* code() const;  // the table this weight's dequantization uses (FP4 sign of zero by path)

 private:
  Tensor packed_;
  Bnb4bitState state_;
  DType compute_dtype_;
  std::string name_;
  int64_t numel_ = 0, nblocks_ = 0, nbytes_ = 0;
  std::array<float, 16> code_{};
  std::array<float, 512> pairs_{};
};

}  // namespace diffq::quant
