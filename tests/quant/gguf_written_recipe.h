// The content of tests/fixtures/quant/gguf/written.gguf: a GGUF file written by diffq (io::write_gguf)
// with every metadata value type, tensors of 1 to 4 dims and one [2, 256] weight per supported ggml
// type (quantized by diffq's reference quantizers). tools/reference/check_gguf_written.py rebuilds the
// same content in Python (values from the same integer formula, quantized by ggml / gguf-py) and
// checks the file with gguf-py's GGUFReader; test_gguf_writer.cpp checks the file is still what diffq
// writes. Regenerate: DIFFQ_REGENERATE_GGUF_FIXTURE=1 build/bin/test_quant --gtest_filter='GGUFWritten*'
// then tools/.venv/bin/python tools/reference/check_gguf_written.py.
#pragma once

#include <cctype>
#include <string>
#include <vector>

#include "diffq/dtype.h"
#include "io/gguf_writer.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::quant::gguf::testing {

// Exact in f32, f16 and bf16: k/64 for k in [-128, 128].
inline float recipe_value(int64_t i) { return float(int((i * 7919) % 257) - 128) / 64.0f; }

inline std::vector<float> recipe_values(int64_t n, int64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = recipe_value(i + seed * 1000);
  return v;
}

inline io::GGUFMetadata recipe_metadata() {
  using io::GGUFValueType;
  std::vector<io::GGUFValue> nested = {
      io::gguf_array(GGUFValueType::int32, {io::gguf_i32(1), io::gguf_i32(2)}),
      io::gguf_array(GGUFValueType::int32, {io::gguf_i32(3)})};
  return {
      {"general.architecture", io::gguf_string("diffq-test")},
      {"general.name", io::gguf_string("written by diffq")},
      {"general.alignment", io::gguf_u32(64)},
      {"test.u8", io::gguf_u8(200)},
      {"test.i8", io::gguf_i8(-100)},
      {"test.u16", io::gguf_u16(60000)},
      {"test.i16", io::gguf_i16(-30000)},
      {"test.u32", io::gguf_u32(4000000000u)},
      {"test.i32", io::gguf_i32(-2000000000)},
      {"test.u64", io::gguf_u64(9223372036854775813ull)},
      {"test.i64", io::gguf_i64(-4611686018427387904ll)},
      {"test.f32", io::gguf_f32(0.1f)},
      {"test.f64", io::gguf_f64(0.1)},
      {"test.bool", io::gguf_bool(true)},
      {"test.string", io::gguf_string("h\xc3\xa9llo \xe2\x9c\x93")},
      {"test.empty_string", io::gguf_string("")},
      {"test.arr_i32", io::gguf_array(GGUFValueType::int32, {io::gguf_i32(1), io::gguf_i32(-2), io::gguf_i32(3)})},
      {"test.arr_f32", io::gguf_array(GGUFValueType::float32, {io::gguf_f32(0.5f), io::gguf_f32(-1.25f)})},
      {"test.arr_str", io::gguf_array(GGUFValueType::string,
                                      {io::gguf_string("a"), io::gguf_string("bc"), io::gguf_string("")})},
      {"test.arr_bool", io::gguf_array(GGUFValueType::boolean, {io::gguf_bool(true), io::gguf_bool(false)})},
      {"test.arr_empty", io::gguf_array(GGUFValueType::uint8, {})},
      {"test.arr_nested", io::gguf_array(GGUFValueType::array, nested)},
  };
}

inline std::vector<io::GGUFWriteTensor> recipe_tensors() {
  std::vector<io::GGUFWriteTensor> out;
  auto plain = [&](std::string name, GGMLType t, Shape shape, int64_t seed) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const auto v = recipe_values(n, seed);
    const TypeTraits& tr = *find_type(t);
    std::vector<uint8_t> bytes(size_t(tr.row_bytes(n)));
    tr.quantize_ref(v.data(), bytes.data(), n);
    out.push_back({std::move(name), uint32_t(t), std::move(shape), io::bytes_tensor(bytes.data(), bytes.size())});
  };
  plain("token_embd.weight", GGMLType::F32, {3, 5}, 1);
  plain("norm.weight", GGMLType::F16, {4, 8}, 2);
  plain("vec.bias", GGMLType::F32, {7}, 3);
  plain("cube.f32", GGMLType::F32, {2, 3, 4}, 4);
  plain("conv.weight", GGMLType::F16, {2, 3, 1, 32}, 5);
  int64_t seed = 10;
  for (const TypeTraits& t : supported_types()) {
    std::string lname(t.name());
    for (char& c : lname) c = char(std::tolower(static_cast<unsigned char>(c)));
    // Each row quantized separately, as ggml does ([N, K] = N rows of K).
    const int64_t N = 2, K = 256;
    const auto v = recipe_values(N * K, seed++);
    std::vector<uint8_t> bytes(size_t(N * t.row_bytes(K)));
    for (int64_t r = 0; r < N; ++r) t.quantize_ref(v.data() + r * K, bytes.data() + r * t.row_bytes(K), K);
    out.push_back({"blk." + lname + ".weight", uint32_t(t.type), {N, K}, io::bytes_tensor(bytes.data(), bytes.size())});
  }
  return out;
}

}  // namespace diffq::quant::gguf::testing
