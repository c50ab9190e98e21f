// GGUF (ggml's single-file format): header, metadata key/values, tensor infos, and mmap-backed raw byte
// views per tensor. Dequantization lives in src/quant; this file only reads and lists.
//
// Layout: "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv | kv* | tensor_info* | padding to
// `general.alignment` (default 32) | data. Strings are u64 length + bytes. A tensor's dims are ggml
// order (ne[0] = innermost), the reverse of torch's shape; its offset is relative to the data section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::io {

class MappedFile;

// ---- ggml tensor types -------------------------------------------------------------------------------
struct GGMLTypeInfo {
  uint32_t id;            // the number stored in the file (GGMLQuantizationType)
  std::string_view name;  // "Q4_0", "BF16", ...
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
};
// The type of `id`, or nullptr when diffq does not know it (removed or newer types).
const GGMLTypeInfo* ggml_type_info(uint32_t id);
const GGMLTypeInfo* ggml_type_info(std::string_view name);
std::span<const GGMLTypeInfo> ggml_types();

// ---- metadata values ----------------------------------------------------------------------------------
enum class GGUFValueType : uint32_t {
  uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6, boolean = 7,
  string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12,
};
std::string_view gguf_value_type_name(GGUFValueType t);

struct GGUFValue {
  GGUFValueType type = GGUFValueType::uint8;
  // Scalars: exactly one of these is meaningful, by `type`.
  uint64_t u = 0;   // unsigned integers
  int64_t i = 0;    // signed integers
  double f = 0;     // float32 / float64
  bool b = false;
  std::string s;
  // Arrays: element type and count; string/array elements are parsed into `items`, numeric/bool
  // elements stay packed (little-endian) at `raw`, which points into the parsed buffer / mapping.
  GGUFValueType elem_type = GGUFValueType::uint8;
  uint64_t count = 0;
  std::vector<GGUFValue> items;
  const uint8_t* raw = nullptr;

  bool is_integer() const;
  uint64_t as_uint() const;   // integer >= 0 (throws otherwise)
  int64_t as_int() const;     // any integer that fits int64
  double as_double() const;   // any number
  const std::string& as_string() const;
  double number_at(uint64_t k) const;  // element k of a numeric/bool array (integers above 2^53 round)
  int64_t int_at(uint64_t k) const;    // element k of a signed-integer array, exactly
  // JSON rendering; arrays longer than max_items are cut and end with "... (N more)".
  nlohmann::json to_json(uint64_t max_items = UINT64_MAX) const;
};

// ---- tensors ----------------------------------------------------------------------------------------------
struct GGUFTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order, ne[0] innermost
  Shape shape;               // torch order (reversed ne)
  uint32_t type = 0;         // ggml type id (known: ggml_type_info(type) != nullptr)
  uint64_t offset = 0;       // relative to the data section; a multiple of the alignment
  uint64_t numel = 0;
  uint64_t nbytes = 0;
  std::string_view type_name() const;
};

struct GGUFHeader {
  uint32_t version = 0;
  std::vector<std::pair<std::string, GGUFValue>> kv;  // file order
  std::vector<GGUFTensorInfo> tensors;                 // file order
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute start of the data section
  uint64_t data_bytes = 0;
  const GGUFValue* find(std::string_view key) const;
  const GGUFTensorInfo* find_tensor(std::string_view name) const;
};

// Parses and validates a whole GGUF file held in memory. Throws diffq::Error("[gguf] ...") on any
// defect, never reads outside [data, data + size). Array values keep pointers into `data`.
GGUFHeader parse_gguf(const uint8_t* data, size_t size, std::string_view file_name);

class GGUFFile {
 public:
  static GGUFFile open(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const GGUFHeader& header() const { return header_; }
  const GGUFValue* find(std::string_view key) const { return header_.find(key); }
  const std::vector<GGUFTensorInfo>& tensors() const { return header_.tensors; }
  const GGUFTensorInfo& tensor_info(std::string_view name) const;  // throws naming the file
  // The tensor's bytes as stored (blocks for quantized types), borrowed from the mapping.
  std::span<const uint8_t> raw_bytes(std::string_view name) const;
  // The same bytes as a 1-D uint8 Tensor sharing the mapping (keeps it alive).
  Tensor raw_tensor(std::string_view name) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> file_;
  GGUFHeader header_;
};

}  // namespace diffq::io
