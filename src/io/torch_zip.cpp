#include "io/torch_zip.h"

#include <algorithm>
#include <cstring>

#include "diffq/error.h"

namespace diffq::io {

namespace {

constexpr const char* kCtx = "zip";
constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEocdSig = 0x06054b50,
                   kEocd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr size_t kEocdSize = 22, kCentralSize = 46, kLocalSize = 30, kLocatorSize = 20, kEocd64Size = 56;

uint64_t rd(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bounds-checked little-endian reads within [0, size).
struct Reader {
  const uint8_t* data;
  size_t size;
  const std::string& file;
  bool fits(uint64_t off, uint64_t n) const { return off <= size && n <= size - off; }
  uint64_t u(uint64_t off, int n, const char* what) const {
    check(fits(off, uint64_t(n)), kCtx, file, ": ", what, " at byte ", off, " lies past the end of the file (",
          size, " bytes; truncated?)");
    return rd(data + off, n);
  }
};

}  // namespace

bool looks_like_zip(const uint8_t* data, size_t size) {
  return size >= 4 && data[0] == 'P' && data[1] == 'K' && data[2] == 3 && data[3] == 4;
}

ZipDirectory ZipDirectory::parse(const uint8_t* data, size_t size, std::string_view file_name) {
  ZipDirectory z;
  z.file_ = std::string(file_name);
  const Reader r{data, size, z.file_};
  check(size >= kEocdSize, kCtx, z.file_, " has ", size, " bytes: too short for a zip archive");

  // The end-of-central-directory record: the last 22 bytes unless a comment (<= 64 KiB) follows it.
  size_t eocd = size_t(-1);
  const size_t lowest = size > kEocdSize + 0xffff ? size - kEocdSize - 0xffff : 0;
  for (size_t p = size - kEocdSize + 1; p-- > lowest;) {
    if (rd(data + p, 4) == kEocdSig && p + kEocdSize + rd(data + p + 20, 2) == size) {
      eocd = p;
      break;
    }
  }
  check(eocd != size_t(-1), kCtx, z.file_,
        " has no end-of-central-directory record (not a zip archive, or truncated)");
  const uint64_t disk = r.u(eocd + 4, 2, "EOCD"), cd_disk = r.u(eocd + 6, 2, "EOCD");
  uint64_t count = r.u(eocd + 10, 2, "EOCD"), cd_size = r.u(eocd + 12, 4, "EOCD"),
           cd_off = r.u(eocd + 16, 4, "EOCD");
  const bool zip64 = count == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff;
  if (zip64 || (eocd >= kLocatorSize && rd(data + eocd - kLocatorSize, 4) == kLocator64Sig)) {
    check(eocd >= kLocatorSize && rd(data + eocd - kLocatorSize, 4) == kLocator64Sig, kCtx, z.file_,
          ": ZIP64 sizes without a ZIP64 locator");
    const uint64_t e64 = r.u(eocd - kLocatorSize + 8, 8, "ZIP64 locator");
    check(r.fits(e64, kEocd64Size) && rd(data + e64, 4) == kEocd64Sig, kCtx, z.file_,
          ": the ZIP64 end-of-central-directory record at byte ", e64, " is missing or truncated");
    check(rd(data + e64 + 16, 4) == 0 && rd(data + e64 + 20, 4) == 0, kCtx, z.file_,
          ": multi-disk zip archives are not supported");
    count = rd(data + e64 + 32, 8);
    cd_size = rd(data + e64 + 40, 8);
    cd_off = rd(data + e64 + 48, 8);
  } else {
    check(disk == 0 && cd_disk == 0, kCtx, z.file_, ": multi-disk zip archives are not supported");
  }
  check(r.fits(cd_off, cd_size), kCtx, z.file_, ": the central directory (", cd_size, " bytes at byte ", cd_off,
        ") lies past the end of the file (", size, " bytes; truncated?)");
  check(count <= cd_size / kCentralSize, kCtx, z.file_, ": ", count, " entries cannot fit a central directory of ",
        cd_size, " bytes");

  uint64_t p = cd_off;
  const uint64_t cd_end = cd_off + cd_size;
  z.entries_.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) {
    check(p + kCentralSize <= cd_end && rd(data + p, 4) == kCentralSig, kCtx, z.file_, ": central directory entry ",
          i, " at byte ", p, " is malformed");
    const uint64_t flags = rd(data + p + 8, 2), method = rd(data + p + 10, 2);
    uint64_t csize = rd(data + p + 20, 4), usize = rd(data + p + 24, 4);
    const uint64_t nlen = rd(data + p + 28, 2), xlen = rd(data + p + 30, 2), clen = rd(data + p + 32, 2);
    uint64_t local = rd(data + p + 42, 4);
    check(p + kCentralSize + nlen + xlen + clen <= cd_end, kCtx, z.file_, ": central directory entry ", i,
          " runs past the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(data + p + kCentralSize), size_t(nlen));
    check((flags & 1) == 0, kCtx, z.file_, ": entry '", e.name, "' is encrypted");
    // ZIP64 extended information: the fields that overflowed, in this order.
    for (uint64_t x = p + kCentralSize + nlen, xe = x + xlen; x + 4 <= xe;) {
      const uint64_t id = rd(data + x, 2), len = rd(data + x + 2, 2);
      check(x + 4 + len <= xe, kCtx, z.file_, ": entry '", e.name, "' has a malformed extra field");
      if (id == 1) {
        uint64_t q = x + 4;
        auto take = [&](uint64_t& v) {
          check(q + 8 <= x + 4 + len, kCtx, z.file_, ": entry '", e.name, "' has a short ZIP64 extra field");
          v = rd(data + q, 8);
          q += 8;
        };
        if (usize == 0xffffffff) take(usize);
        if (csize == 0xffffffff) take(csize);
        if (local == 0xffffffff) take(local);
      }
      x += 4 + len;
    }
    check(r.fits(local, kLocalSize) && rd(data + local, 4) == kLocalSig, kCtx, z.file_, ": entry '", e.name,
          "' points to byte ", local, ", where there is no local header (truncated?)");
    const uint64_t lname = rd(data + local + 26, 2), lextra = rd(data + local + 28, 2);
    e.method = uint16_t(method);
    e.data_offset = local + kLocalSize + lname + lextra;
    e.size = usize;
    e.compressed_size = csize;
    check(r.fits(e.data_offset, csize), kCtx, z.file_, ": the data of entry '", e.name, "' (", csize,
          " bytes at byte ", e.data_offset, ") lies past the end of the file (", size, " bytes; truncated?)");
    check(method != 0 || csize == usize, kCtx, z.file_, ": stored entry '", e.name, "' has compressed size ", csize,
          " but size ", usize);
    check(z.index_.emplace(e.name, z.entries_.size()).second, kCtx, z.file_, ": entry '", e.name, "' appears twice");
    z.entries_.push_back(std::move(e));
    p += kCentralSize + nlen + xlen + clen;
  }
  return z;
}

const ZipEntry* ZipDirectory::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const ZipEntry& ZipDirectory::stored(std::string_view name) const {
  const ZipEntry* e = find(name);
  check(e != nullptr, kCtx, file_, " has no entry '", name, "'");
  check(e->method == 0, kCtx, file_, ": entry '", name, "' is compressed (method ", e->method,
        "); PyTorch writes its checkpoints stored, so diffq maps entries without decompressing (re-save it "
        "with torch.save)");
  return *e;
}

}  // namespace diffq::io
