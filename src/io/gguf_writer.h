// GGUF writer (version 3): metadata key/values in the given order, tensor infos, then each tensor's
// raw bytes at an offset that is a multiple of the alignment (general.alignment when the metadata
// carries it, a uint32 power of two; else 32), zero padding after every tensor, as
// ggml's gguf_write_to_file and gguf-py's GGUFWriter do. Files are read back by io::GGUFFile and by
// gguf-py's GGUFReader (tools/reference/check_gguf_written.py).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "diffq/tensor.h"
#include "io/gguf.h"

namespace diffq::io {

struct GGUFWriteTensor {
  std::string name;
  uint32_t type = 0;  // ggml type id (anything io::ggml_type_info knows)
  Shape shape;        // torch order ([N, K] for a Linear weight); written reversed as ggml's ne
  Tensor data;        // the tensor's bytes as stored (blocks for quantized types), any dtype, on the CPU;
                      // its nbytes must be numel / block_size * type_size
};

using GGUFMetadata = std::vector<std::pair<std::string, GGUFValue>>;

// Metadata value builders (GGUFValue is the reader's type; arrays hold their elements in `items`).
GGUFValue gguf_u8(uint8_t v);
GGUFValue gguf_i8(int8_t v);
GGUFValue gguf_u16(uint16_t v);
GGUFValue gguf_i16(int16_t v);
GGUFValue gguf_u32(uint32_t v);
GGUFValue gguf_i32(int32_t v);
GGUFValue gguf_u64(uint64_t v);
GGUFValue gguf_i64(int64_t v);
GGUFValue gguf_f32(float v);
GGUFValue gguf_f64(double v);
GGUFValue gguf_bool(bool v);
GGUFValue gguf_string(std::string v);
// An array of `elem_type` values; every item must have that type (arrays of arrays allowed).
GGUFValue gguf_array(GGUFValueType elem_type, std::vector<GGUFValue> items);

// Serialises to a byte sink. Validates everything first (names unique and non-empty, 1..4 dims,
// innermost dim a multiple of the block size, byte counts, value types, alignment) and throws
// diffq::Error("[gguf] ...") naming the offending key or tensor before the sink sees a byte.
void write_gguf(const std::function<void(const void*, size_t)>& sink, const GGUFMetadata& metadata,
                const std::vector<GGUFWriteTensor>& tensors);
std::vector<uint8_t> serialize_gguf(const GGUFMetadata& metadata, const std::vector<GGUFWriteTensor>& tensors);

// Writes `path` atomically: a temporary file in the same directory, fsync, rename. On any error the
// temporary is removed and `path` is left as it was.
void write_gguf(const std::filesystem::path& path, const GGUFMetadata& metadata,
                const std::vector<GGUFWriteTensor>& tensors);

// A 1-D uint8 tensor holding a copy of `bytes` (for GGUFWriteTensor::data).
Tensor bytes_tensor(const void* bytes, size_t n);

}  // namespace diffq::io
