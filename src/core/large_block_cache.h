// Freed host blocks too large for glibc's heap, kept for the next allocation of their size.
//
// glibc serves blocks above its mmap threshold (at most 32 MiB on 64-bit) with a fresh mmap() and unmaps
// them on free, so every such activation page-faults, and the kernel zeroes, all of its pages again on
// first touch: a fifth of a Wan VAE decode's time on a 2-core host went to the kernel's fault path
// (docs/benchmarks.md "Fifth AMX session"). The CPU allocator (core/memory.cpp) puts those blocks here
// instead of freeing them; an allocation of the same size (rounded up to 2 MiB granules) takes one back,
// already resident. At most `capacity` bytes are held (the oldest released first), so host memory grows
// by at most that much over what is live; release() (return_freed_memory_to_os, empty_cache) frees all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace diffq::core {

class LargeBlockCache {
 public:
  static constexpr size_t kGranule = size_t(2) << 20;

  explicit LargeBlockCache(size_t capacity) : capacity_(capacity) {}
  ~LargeBlockCache() { release(); }
  LargeBlockCache(const LargeBlockCache&) = delete;
  LargeBlockCache& operator=(const LargeBlockCache&) = delete;

  // The size a block of n bytes is allocated with (and cached under): n rounded up to whole granules.
  static size_t block_size(size_t n) { return (n + kGranule - 1) / kGranule * kGranule; }
  // A cached block of exactly block_size(n) bytes, or nullptr.
  void* take(size_t n);
  // Keeps p (block_size(n) bytes, 64-byte aligned, from std::aligned_alloc) for reuse, freeing the oldest
  // blocks beyond the capacity (p itself when it alone exceeds it).
  void put(void* p, size_t n);
  // Frees every cached block.
  void release();
  size_t cached_bytes() const;

 private:
  struct Block {
    void* p;
    size_t bytes;
  };
  size_t capacity_;
  size_t bytes_ = 0;
  std::deque<Block> blocks_;  // oldest first
  mutable std::mutex mu_;
};

}  // namespace diffq::core
