// GroupOffloadOptions::drop_page_cache: after a forward with disk offloading, the group files have no
// pages left in the OS page cache (mincore on a fresh mapping), while without the option they do;
// outputs are bit-identical to no offloading either way.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <fcntl.h>

#include "diffq/error.h"
#include "offload/group_offloader.h"
#include "offload_test_util.h"

namespace {

using namespace offload_test;
using diffq::offload::GroupOffloader;
using diffq::offload::GroupOffloadOptions;
using diffq::offload::OffloadType;

// Pages of `path` present in the page cache.
size_t cached_pages(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const size_t len = std::filesystem::file_size(path), page = size_t(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return 0;
  std::vector<unsigned char> v((len + page - 1) / page);
  size_t n = 0;
  if (::mincore(p, len, v.data()) == 0)
    for (unsigned char c : v) n += c & 1;
  ::munmap(p, len);
  return n;
}

TEST(DropPageCache, OffloadFilesLeaveThePageCache) {
  ScratchDir dir("drop-cache");
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.path.c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) GTEST_SKIP() << "temp dir is tmpfs: its pages are the file's storage";

  ToyModel plain(4, 256);
  const Tensor x = diffq::ops::mul_scalar(Tensor::full({3, 256}, 1.0, diffq::DType::f32), 0.5);
  const std::vector<int> order = {0, 1, 2, 3};
  const Tensor ref = plain(x, order);

  for (const bool drop : {false, true}) {
    ToyModel m(4, 256);  // same seed: same weights as `plain`
    GroupOffloadOptions o;
    o.offload_type = OffloadType::block_level;
    o.num_blocks_per_group = 1;
    o.offload_to_disk_path = dir.path / (drop ? "drop" : "keep");
    o.drop_page_cache = drop;
    auto e = GroupOffloader::apply(m, o);
    for (int pass = 0; pass < 2; ++pass) EXPECT_TRUE(bit_identical(m(x, order), ref)) << "drop=" << drop;
    size_t files = 0, pages = 0;
    for (const auto& f : std::filesystem::directory_iterator(o.offload_to_disk_path)) {
      ++files;
      pages += cached_pages(f.path());
    }
    EXPECT_GE(files, 4u);
    if (drop)
      EXPECT_EQ(pages, 0u) << "group files still cached after reads with drop_page_cache";
    else
      EXPECT_GT(pages, 0u) << "without drop_page_cache the reads leave the files cached (the check discriminates)";
    e->remove();
  }
}

TEST(DropPageCache, NeedsADiskHome) {
  ToyModel m(2);
  GroupOffloadOptions o;
  o.offload_type = OffloadType::block_level;
  o.num_blocks_per_group = 1;
  o.drop_page_cache = true;
  try {
    GroupOffloader::apply(m, o);
    ADD_FAILURE() << "expected an error";
  } catch (const diffq::Error& err) {
    EXPECT_NE(std::string(err.what()).find("drop_page_cache needs a disk home"), std::string::npos) << err.what();
  }
}

}  // namespace
