#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "diffq/error.h"

namespace diffq::io {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path, const char* ctx) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ctx, "cannot open ", path.string(), ": ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(ctx, "cannot stat ", path.string(), ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ctx, path.string(), " is not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail(ctx, "cannot mmap ", path.string(), " (", format_bytes(m->size_), "): ", std::strerror(e));
    }
    m->data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid after close
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void release_pages(const void* p, size_t n) {
  if (!p || n == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(p) + page - 1) / page * page, e = (uintptr_t(p) + n) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);  // advisory: errors are harmless
}

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return cat(n, " B");
  double v = double(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace diffq::io
