// safetensors: read (mmap, zero-copy), validate, and write (atomic) the Hugging Face format.
//
// File = u64 little-endian N | N bytes of JSON header | data section. The header maps tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) plus an
// optional "__metadata__" string map. Validation follows the Python/Rust library: the tensors must
// cover the data section exactly, without gaps or overlaps, and each byte range must equal
// numel * dtype size. diffq additionally rejects duplicate JSON keys (the Rust library silently keeps
// one of them).
//
// Writing reproduces the Python library's bytes exactly: tensors ordered by dtype (I64, F32, I32, BF16,
// F16, F8_E4M3, F8_E5M2, I8, U8, BOOL) then by name, compact JSON with "__metadata__" first, header
// padded with spaces to a multiple of 8. (Python writes metadata keys in a random HashMap order, so
// files with 2+ metadata keys are byte-identical only up to that order; diffq writes them sorted.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::io {

class MappedFile;

using StateDict = std::map<std::string, Tensor>;  // name -> tensor, sorted by name
using Metadata = std::map<std::string, std::string>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The header's record of one tensor.
struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;      // as written in the header: "F32", "F64", ...
  std::optional<DType> dtype;  // nullopt: a valid safetensors dtype diffq cannot hold (F64, I16, ...)
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::optional<Metadata> metadata;        // "__metadata__" when present
  std::vector<SafetensorsEntry> tensors;   // in file order (ascending begin)
  uint64_t header_bytes = 0;               // N: JSON length including padding
  uint64_t data_bytes = 0;                 // size of the data section
  uint64_t data_offset() const { return 8 + header_bytes; }
};

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // the Python library's limit

// Parses and validates a complete safetensors file held in memory (`size` = the whole file).
// `file_name` only appears in error messages. Throws diffq::Error("[safetensors] ...") on any defect;
// never reads outside [data, data + size).
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, std::string_view file_name);

// An opened (memory-mapped) safetensors file. Copies share the mapping.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const Metadata& metadata() const;  // empty map when the file has none
  const std::vector<SafetensorsEntry>& entries() const { return header_.tensors; }
  std::vector<std::string> names() const;  // file order
  bool contains(std::string_view name) const;
  const SafetensorsEntry& entry(std::string_view name) const;  // throws naming the file

  // The tensor as a view of the mapped bytes (no copy; the mapping lives while the tensor does).
  // Data whose address is not a multiple of the element size (possible only in files not written by
  // the Python library) is copied into an aligned buffer instead.
  Tensor tensor(std::string_view name) const;
  StateDict tensors() const;  // every tensor, zero-copy

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

// ---- writing ---------------------------------------------------------------------------------------

// The header JSON (padded) that the Python library writes for these tensors and metadata; also returns
// the order in which tensor bytes follow it.
std::string safetensors_header_json(const NamedTensors& tensors,
                                    const std::optional<Metadata>& metadata,
                                    std::vector<size_t>* data_order = nullptr);

// Serializes to a byte sink (any layout, device or dtype; non-contiguous views are written in logical
// order). `sink` receives the file's bytes in order.
void write_safetensors(const std::function<void(const void*, size_t)>& sink,
                       const NamedTensors& tensors, const std::optional<Metadata>& metadata);
std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors,
                                           const std::optional<Metadata>& metadata = std::nullopt);

// Writes `path` atomically: a temporary file in the same directory, fsync, then rename. On any error
// the temporary is removed and `path` is untouched.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::optional<Metadata>& metadata = std::nullopt);
void save_safetensors(const std::filesystem::path& path, const StateDict& tensors,
                      const std::optional<Metadata>& metadata = std::nullopt);

}  // namespace diffq::io
