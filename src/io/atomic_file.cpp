// Temporary sibling + fsync + rename (see atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "diffq/error.h"

namespace diffq::io {

void write_file_atomically(const std::filesystem::path& path, std::string_view ctx_view,
                           const std::function<void(const ByteSink&)>& produce) {
  const std::string ctx(ctx_view);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::random_device rd;
  std::filesystem::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = dir / cat(".", path.filename().string(), ".tmp.", ::getpid(), ".", rd());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    fail(ctx, "cannot write ", path.string(), ": cannot create a temporary file in ", dir.string(), ": ",
         std::strerror(errno));
  try {
    produce([&](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      while (n > 0) {
        const ssize_t w = ::write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail(ctx, "cannot write ", path.string(), ": writing ", tmp.string(), ": ",
                         std::strerror(w < 0 ? errno : EIO));
        b += w;
        n -= size_t(w);
      }
    });
    if (::fsync(fd) != 0) fail(ctx, "cannot write ", path.string(), ": fsync failed: ", std::strerror(errno));
    const int fd2 = fd;
    fd = -1;
    if (::close(fd2) != 0) fail(ctx, "cannot write ", path.string(), ": close failed: ", std::strerror(errno));
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail(ctx, "cannot write ", path.string(), ": rename of ", tmp.string(), " failed: ", ec.message());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace diffq::io
