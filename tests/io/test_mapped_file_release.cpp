// io::release_pages: released bytes of a file mapping stop counting as resident and read back intact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "io/mapped_file.h"

namespace {

// This process's resident set in bytes (/proc/self/statm, second field, pages).
size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t total = 0, resident = 0;
  f >> total >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

TEST(MappedFile, ReleasePagesDropsResidencyAndKeepsTheBytes) {
  const auto path = std::filesystem::temp_directory_path() / "diffq-release-pages.bin";
  const size_t n = size_t(64) << 20;  // larger than any readahead window
  {
    std::ofstream f(path, std::ios::binary);
    std::vector<char> chunk(1 << 20);
    for (size_t i = 0; i < n / chunk.size(); ++i) {
      for (size_t j = 0; j < chunk.size(); ++j) chunk[j] = char((i * 31 + j) & 0xFF);
      f.write(chunk.data(), std::streamsize(chunk.size()));
    }
  }
  auto m = diffq::io::MappedFile::open(path);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 4096) sum += m->data()[i];  // touch every page
  const size_t before = rss_bytes();
  diffq::io::release_pages(m->data() + 1, n - 2);  // partial edge pages are kept
  const size_t after = rss_bytes();
  EXPECT_GT(before, after + n / 2) << "RSS " << before << " -> " << after;  // the mapped pages left our RSS
  uint64_t sum2 = 0;
  for (size_t i = 0; i < n; i += 4096) sum2 += m->data()[i];
  EXPECT_EQ(sum, sum2);  // readable, same bytes
  diffq::io::release_pages(nullptr, 10);  // no-ops
  diffq::io::release_pages(m->data(), 0);
  std::filesystem::remove(path);
}

}  // namespace
