#include "quant/gguf/gguf_quants.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::quant::gguf {

namespace {

TypeTraits make(GGMLType t, DequantizeRowFn deq, QuantizeRowFn q, bool gguf_py) {
  const io::GGMLTypeInfo* info = io::ggml_type_info(uint32_t(t));
  check(info != nullptr, "gguf", "ggml type ", uint32_t(t), " is missing from io::ggml_types()");
  return TypeTraits{t, info, deq, q, gguf_py};
}

const std::array<TypeTraits, 15>& table() {
  using T = GGMLType;
  static const std::array<TypeTraits, 15> t = {
      make(T::F32, dequantize_row_f32, quantize_row_f32, true),
      make(T::F16, dequantize_row_f16, quantize_row_f16, true),
      make(T::BF16, dequantize_row_bf16, quantize_row_bf16, true),
      make(T::Q4_0, dequantize_row_q4_0, quantize_row_q4_0, true),
      make(T::Q4_1, dequantize_row_q4_1, quantize_row_q4_1, true),
      make(T::Q5_0, dequantize_row_q5_0, quantize_row_q5_0, true),
      make(T::Q5_1, dequantize_row_q5_1, quantize_row_q5_1, true),
      make(T::Q8_0, dequantize_row_q8_0, quantize_row_q8_0, true),
      make(T::Q2_K, dequantize_row_q2_K, quantize_row_q2_K, false),
      make(T::Q3_K, dequantize_row_q3_K, quantize_row_q3_K, false),
      make(T::Q4_K, dequantize_row_q4_K, quantize_row_q4_K, false),
      make(T::Q5_K, dequantize_row_q5_K, quantize_row_q5_K, false),
      make(T::Q6_K, dequantize_row_q6_K, quantize_row_q6_K, false),
      make(T::IQ4_NL, dequantize_row_iq4_nl, quantize_row_iq4_nl, false),
      make(T::IQ4_XS, dequantize_row_iq4_xs, quantize_row_iq4_xs, false),
  };
  return t;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

int64_t TypeTraits::row_bytes(int64_t n) const {
  check(n >= 0 && n % block_size() == 0, "gguf", "a row of ", n, " elements is not a whole number of ", name(),
        " blocks (", block_size(), " elements each)");
  return n / block_size() * type_size();
}

std::span<const TypeTraits> supported_types() { return table(); }

const TypeTraits* find_type(GGMLType t) { return find_type(uint32_t(t)); }

const TypeTraits* find_type(uint32_t id) {
  for (const TypeTraits& t : table())
    if (uint32_t(t.type) == id) return &t;
  return nullptr;
}

std::string supported_type_names() {
  std::string s;
  for (const TypeTraits& t : table()) {
    if (!s.empty()) s += ", ";
    s += t.name();
  }
  return s;
}

const TypeTraits& type_or_throw(uint32_t id, std::string_view what) {
  if (const TypeTraits* t = find_type(id)) return *t;
  const io::GGMLTypeInfo* info = io::ggml_type_info(id);
  if (info)
    fail("gguf", what, " has ggml type ", info->name, ", which diffq cannot dequantize (supported: ",
         supported_type_names(), ")");
  fail("gguf", what, " has unknown ggml type id ", id, " (supported: ", supported_type_names(), ")");
}

std::optional<GGMLType> parse_type(std::string_view name) {
  std::string n = lower(name);
  if (n.rfind("gguf_", 0) == 0) n = n.substr(5);
  for (const TypeTraits& t : table())
    if (lower(t.name()) == n) return t.type;
  return std::nullopt;
}

void TypeTraits::quantize_rows(const float* src, int64_t rows, int64_t k, uint8_t* dst) const {
  const int64_t rb = row_bytes(k);
  // K-quant rows cost ~20 candidate scales per 32 values: a few rows per task are enough work.
  core::parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_ref(src + r * k, dst + r * rb, k);
  });
}

}  // namespace diffq::quant::gguf
