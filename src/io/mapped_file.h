// A read-only view of a whole file through mmap. Tensors read from checkpoints borrow these bytes
// (zero-copy) and hold the MappedFile alive through their Storage's owner pointer.
//
// The mapping is private copy-on-write (PROT_READ|PROT_WRITE, MAP_PRIVATE): code that writes into a
// borrowed tensor changes only its own pages, never the file on disk, and never faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace diffq::io {

class MappedFile {
 public:
  // Maps `path` (throws diffq::Error "[<ctx>] cannot open <path>: <reason>"). Empty files map to no
  // bytes (data() == nullptr, size() == 0).
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path,
                                          const char* ctx = "io");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() const { return data_; }  // copy-on-write pages, see above
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

// Drops the resident pages lying wholly inside [p, p + n) of a file mapping (madvise MADV_DONTNEED),
// so bytes that were read once (e.g. a weight just quantized while loading) stop counting in the
// process's RSS. Pages shared with neighbouring bytes are kept. The bytes stay readable: a private
// file mapping reads them back from the file (pages written to since mapping lose those writes, so
// call this only on bytes nobody modified). No-op for null/empty ranges.
void release_pages(const void* p, size_t n);

// Human-readable byte count: "12 MiB", "4.0 GiB", "17 B".
std::string format_bytes(uint64_t n);

}  // namespace diffq::io
