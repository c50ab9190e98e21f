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
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual Device device() const = 0;

  MemoryStats stats() const;
  void reset_peak();

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

// Hands freed heap memory back to the OS (malloc_trim on glibc; no-op elsewhere). glibc keeps freed
// chunks (and whole per-thread arenas) mapped otherwise, so RSS would stay at its high-water mark after
// weights moved home or transient buffers of quantize-while-loading were freed.
void return_freed_memory_to_os();

// The process's peak resident set (VmHWM) in bytes since start or the last reset_peak_rss(); 0 when unknown.
int64_t process_peak_rss_bytes();
// Restarts the peak (Linux >= 4.0); false when the kernel refuses.
bool reset_peak_rss();

// Registered by the CUDA backend at static-init time when it is linked in.
using AllocatorFactory = Allocator& (*)(int index);
void register_cuda_allocator(AllocatorFactory f);

}  // namespace diffq
