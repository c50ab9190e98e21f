// The CPU allocator's cache of freed large blocks (src/core/large_block_cache.h): a block comes back for
// an allocation of its granule-rounded size only, the most recently freed first; the capacity bounds
// what is held (oldest released first); release() empties it. Through the allocator: a freed 40 MiB
// tensor's block is reused by the next one of that size, counted in reserved_bytes until
// return_freed_memory_to_os() releases it; blocks under 32 MiB stay with the heap.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/large_block_cache.h"
#include "diffq/memory.h"
#include "diffq/tensor.h"

using namespace diffq;
using core::LargeBlockCache;

namespace {

constexpr size_t MiB = size_t(1) << 20;

void* block(size_t n) { return std::aligned_alloc(64, LargeBlockCache::block_size(n)); }

TEST(LargeBlockCache, ReturnsABlockForItsRoundedSizeOnly) {
  LargeBlockCache c(64 * MiB);
  EXPECT_EQ(c.take(40 * MiB), nullptr);
  void* a = block(40 * MiB + 100);
  c.put(a, 40 * MiB + 100);
  EXPECT_EQ(c.cached_bytes(), 42 * MiB);  // 2 MiB granules
  EXPECT_EQ(c.take(38 * MiB), nullptr);   // another size
  EXPECT_EQ(c.take(41 * MiB), a);         // same granules
  EXPECT_EQ(c.cached_bytes(), 0u);
  EXPECT_EQ(c.take(41 * MiB), nullptr);
  std::free(a);
}

TEST(LargeBlockCache, NewestFirstAndCapacityReleasesTheOldest) {
  LargeBlockCache c(10 * MiB);
  void* a = block(4 * MiB);
  void* b = block(4 * MiB);
  void* d = block(4 * MiB);
  c.put(a, 4 * MiB);
  c.put(b, 4 * MiB);
  EXPECT_EQ(c.cached_bytes(), 8 * MiB);
  c.put(d, 4 * MiB);  // 12 MiB > 10: a (the oldest) is freed
  EXPECT_EQ(c.cached_bytes(), 8 * MiB);
  EXPECT_EQ(c.take(4 * MiB), d);
  EXPECT_EQ(c.take(4 * MiB), b);
  EXPECT_EQ(c.take(4 * MiB), nullptr);
  void* big = block(12 * MiB);
  c.put(big, 12 * MiB);  // larger than the capacity alone: freed at once
  EXPECT_EQ(c.cached_bytes(), 0u);
  c.put(b, 4 * MiB);
  c.release();
  EXPECT_EQ(c.cached_bytes(), 0u);
  EXPECT_EQ(c.take(4 * MiB), nullptr);
  std::free(d);
}

TEST(LargeBlockCache, CpuAllocatorReusesFreedLargeBlocks) {
  return_freed_memory_to_os();
  const int64_t base = memory_stats(Device::cpu()).reserved_bytes - memory_stats(Device::cpu()).current_bytes;
  EXPECT_EQ(base, 0);
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({10 * int64_t(MiB)}, DType::f32);  // 40 MiB: above glibc's heap
    first = t.data_ptr();
  }
  MemoryStats s = memory_stats(Device::cpu());
  EXPECT_EQ(s.reserved_bytes - s.current_bytes, int64_t(40 * MiB));
  {
    Tensor t = Tensor::empty({10 * int64_t(MiB)}, DType::f32);
    EXPECT_EQ(t.data_ptr(), first);  // the freed block, already resident
    s = memory_stats(Device::cpu());
    EXPECT_EQ(s.reserved_bytes, s.current_bytes);
  }
  { Tensor small = Tensor::empty({MiB}, DType::f32); }  // 4 MiB: the heap's, not cached
  s = memory_stats(Device::cpu());
  EXPECT_EQ(s.reserved_bytes - s.current_bytes, int64_t(40 * MiB));
  return_freed_memory_to_os();
  s = memory_stats(Device::cpu());
  EXPECT_EQ(s.reserved_bytes, s.current_bytes);
}

}  // namespace
