// A pool of reusable byte buffers on one device: the landing places of onloaded groups. Group
// offloading in steady state needs two (the group computing now and the one being prefetched), all
// of the same size for repeated blocks, so a buffer released by one group is reused by the next
// instead of going back to the allocator. Buffers come from the device's allocator, so they are
// counted in memory_stats(); idle buffers beyond `max_idle` are freed at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "diffq/device.h"

namespace diffq::offload {

class BufferPool;

// One leased buffer; returns to its pool when the last shared_ptr to it is dropped (tensors borrow
// its bytes and keep the lease alive through their Storage's owner pointer).
struct PoolBuffer {
  void* data = nullptr;
  size_t capacity = 0;  // bytes allocated
  Device device{};
  // CUDA: an event recorded on the compute stream when the buffer's last user was offloaded; a
  // transfer into the buffer waits for it first (what record_stream guards in PyTorch). CPU: unused.
  std::shared_ptr<void> fence;
};

struct BufferPoolStats {
  int64_t leased_bytes = 0;       // capacity of buffers in use now
  int64_t peak_leased_bytes = 0;  // max of leased_bytes
  int64_t idle_bytes = 0;         // capacity kept for reuse
  int64_t allocations = 0;        // buffers obtained from the allocator
  int64_t reuses = 0;             // leases served from idle buffers
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static std::shared_ptr<BufferPool> create(Device d, size_t max_idle = 2);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `nbytes` (the smallest idle one that fits, else a fresh allocation).
  // Thread-safe (the prefetch thread leases buffers).
  std::shared_ptr<PoolBuffer> acquire(size_t nbytes);
  void trim();  // frees every idle buffer
  BufferPoolStats stats() const;
  Device device() const { return device_; }

 private:
  BufferPool(Device d, size_t max_idle) : device_(d), max_idle_(max_idle) {}
  void give_back(PoolBuffer* b);
  Device device_;
  size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<PoolBuffer*> idle_;
  BufferPoolStats stats_;
};

}  // namespace diffq::offload
