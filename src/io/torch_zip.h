// The zip container of PyTorch checkpoints (torch.save since 1.6): a plain zip archive whose entries
// are written *stored* (no compression), each entry's data aligned to 64 bytes, ZIP64 records once the
// file or an entry passes 4 GiB. diffq only needs the central directory and each entry's data range,
// so tensors can borrow the mmapped bytes directly. Compressed entries are refused when read (naming
// the entry); encrypted entries and multi-disk archives are refused outright.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace diffq::io {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;       // 0 = stored; anything else is compressed
  uint64_t data_offset = 0;  // of the entry's bytes in the archive (after its local header)
  uint64_t size = 0;         // uncompressed size
  uint64_t compressed_size = 0;
};

class ZipDirectory {
 public:
  // Parses the end-of-central-directory record(s), the central directory and every local header of
  // an archive held in memory. `file_name` only appears in error messages. Throws diffq::Error("[zip]
  // ...") on any defect; never reads outside [data, data + size). Every entry's data range lies inside
  // the archive afterwards.
  static ZipDirectory parse(const uint8_t* data, size_t size, std::string_view file_name);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;  // nullptr when absent
  // The stored bytes of `name` as an offset into the archive; throws naming the entry (and the file)
  // when it is absent or compressed.
  const ZipEntry& stored(std::string_view name) const;
  const std::string& file_name() const { return file_; }

 private:
  std::string file_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// True when the bytes start like a zip archive ("PK\x03\x04").
bool looks_like_zip(const uint8_t* data, size_t size);

}  // namespace diffq::io
