// Per-device allocators with current/peak byte accounting (the numbers offloading and quantization
// claims are measured by), in the spirit of torch.cuda.memory_stats.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "diffq/device.h"

namespace diffq {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live allocations
  int64_t peak_bytes = 0;     // max of current_bytes since the last reset
  int64_t num_allocs = 0;     // allocations made since start
  // What the allocator holds from the device: a caching allocator's segments (live blocks plus the
  // cache it reuses without asking the driver), like torch's reserved bytes. The CPU allocator's adds the
  // freed blocks over 32 MiB it keeps for reuse (at most 1 GiB: src/core/large_block_cache.h; its
  // peak_reserved is the live peak), and its device mallocs are 0.
  int64_t reserved_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // max of reserved_bytes since the last reset
  int64_t num_device_mallocs = 0;   // raw device allocations (cudaMalloc) since start
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual Device device() const = 0;

  // Virtual so that a caching allocator adds its reserved bytes (the base fills the rest).
  virtual MemoryStats stats() const;
  virtual void reset_peak();
  // Returns cached memory no live allocation uses to the device (no-op without a cache).
  virtual void empty_cache() {}

 protected:
  void record_alloc(size_t nbytes);
  void record_free(size_t nbytes);

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, count_{0};
};

// The allocator of a device (CPU always; CUDA only in a CUDA build with a GPU present, else throws).
Allocator& allocator_for(Device d);

MemoryStats memory_stats(Device d);
void reset_peak_memory_stats(Device d);
// Returns the device allocator's unused cached memory to the driver (torch.cuda.empty_cache); live
// tensors are untouched. A no-op on the CPU.
void empty_cache(Device d);

// Hands freed heap memory back to the OS (malloc_trim on glibc; no-op elsewhere). glibc keeps freed
// chunks (and whole per-thread arenas) mapped otherwise, so RSS would stay at its high-water mark after
// weights moved home or transient buffers of quantize-while-loading were freed.
void return_freed_memory_to_os();

// The process's peak resident set (VmHWM) in bytes since start or the last reset_peak_rss(); 0 when unknown.
int64_t process_peak_rss_bytes();
// Restarts the peak (Linux >= 4.0); false when the kernel refuses.
bool reset_peak_rss();


}  // namespace diffq
