#include "diffq/memory.h"

#include <cstdlib>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "backend/device_interface.h"
#include "core/large_block_cache.h"
#include "diffq/error.h"

namespace diffq {

MemoryStats Allocator::stats() const {
  MemoryStats s;
  s.current_bytes = current_.load();
  s.peak_bytes = peak_.load();
  s.num_allocs = count_.load();
  s.reserved_bytes = s.current_bytes;  // no cache: what is held is what is live
  s.peak_reserved_bytes = s.peak_bytes;
  return s;
}

void Allocator::reset_peak() { peak_.store(current_.load()); }

void Allocator::record_alloc(size_t nbytes) {
  const int64_t now = current_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
  count_.fetch_add(1);
  int64_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
}

void Allocator::record_free(size_t nbytes) { current_.fetch_sub(int64_t(nbytes)); }

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.substr(0, 5) == "cuda:" && s.size() > 5) {
    int idx = 0;
    for (char c : s.substr(5)) {
      check(c >= '0' && c <= '9', "device", "invalid device '", s, "'");
      idx = idx * 10 + (c - '0');
    }
    return cuda(idx);
  }
  fail("device", "invalid device '", s, "' (expected cpu, cuda or cuda:N)");
}

namespace {

// 64-byte aligned host memory (cache lines, AVX-512 loads).
//
// glibc hands blocks above its mmap threshold to fresh mmap()s and trims freed memory at the heap's top
// back to the OS, so a forward that allocates and frees the same activation sizes step after step
// page-faults (and the kernel zeroes) every one of those pages again: ~40k faults per FLUX-small step
// (`/usr/bin/time -f %R`). Blocks up to 32 MiB (glibc's largest mmap threshold on 64-bit) therefore come
// from the heap, and the heap is not trimmed below 1 GiB of free top: freed activations are reused
// in place. Memory is still returned where diffq knows it was released for good
// (return_freed_memory_to_os: after loading, offloading). Measured: faults per fp32 bench run halved
// (372k -> 191k, the rest is first-touching the weights), peak RSS unchanged or lower.
//
// Blocks above 32 MiB still come from mmap(): freed, they are kept in a LargeBlockCache (core/large_block_cache.h)
// for the next allocation of their size instead of being unmapped, so large activations (the Wan VAE's
// frames) stop page-faulting every op.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kHeapMax = size_t(32) << 20;     // glibc's mmap threshold, set below
  static constexpr size_t kLargeCache = size_t(1) << 30;  // freed large blocks held at most

  CpuAllocator() : large_(kLargeCache) {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, int(kHeapMax));
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }
  void* allocate(size_t nbytes) override {
    const size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = nullptr;
    if (rounded > kHeapMax) {
      p = large_.take(rounded);
      if (!p) p = std::aligned_alloc(64, core::LargeBlockCache::block_size(rounded));
    } else {
      p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    }
    if (!p) fail("memory", "cpu: out of memory allocating ", nbytes, " bytes");
    record_alloc(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    const size_t rounded = (nbytes + 63) / 64 * 64;
    if (p && rounded > kHeapMax)
      large_.put(p, rounded);
    else
      std::free(p);
    record_free(nbytes);
  }
  Device device() const override { return Device::cpu(); }
  MemoryStats stats() const override {
    MemoryStats s = Allocator::stats();
    s.reserved_bytes += int64_t(large_.cached_bytes());
    return s;
  }
  void empty_cache() override { large_.release(); }

 private:
  core::LargeBlockCache large_;
};

Allocator& host_allocator() {
  static CpuAllocator cpu;
  return cpu;
}

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return host_allocator();
  // Every other device's allocator comes from its backend's device interface (src/backend/), which
  // says clearly when this build has no such backend or the machine no such device.
  backend::require_device(d, "memory");
  return backend::device_interface(d.kind)->allocator(d.index);
}

MemoryStats memory_stats(Device d) { return allocator_for(d).stats(); }
void reset_peak_memory_stats(Device d) { allocator_for(d).reset_peak(); }
void empty_cache(Device d) { allocator_for(d).empty_cache(); }

void return_freed_memory_to_os() {
  host_allocator().empty_cache();  // the freed large blocks kept for reuse
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace diffq
