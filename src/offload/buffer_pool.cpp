#include "offload/buffer_pool.h"

#include <algorithm>

#include "diffq/memory.h"

namespace diffq::offload {

std::shared_ptr<BufferPool> BufferPool::create(Device d, size_t max_idle) {
  return std::shared_ptr<BufferPool>(new BufferPool(d, max_idle));
}

BufferPool::~BufferPool() { trim(); }

std::shared_ptr<PoolBuffer> BufferPool::acquire(size_t nbytes) {
  PoolBuffer* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if ((*it)->capacity >= nbytes && (best == idle_.end() || (*it)->capacity < (*best)->capacity)) best = it;
    if (best != idle_.end()) {
      b = *best;
      idle_.erase(best);
      stats_.idle_bytes -= int64_t(b->capacity);
      ++stats_.reuses;
    }
  }
  if (!b) {
    b = new PoolBuffer{allocator_for(device_).allocate(nbytes), nbytes, device_};
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.leased_bytes += int64_t(b->capacity);
    stats_.peak_leased_bytes = std::max(stats_.peak_leased_bytes, stats_.leased_bytes);
  }
  // The deleter keeps the pool alive while any of its buffers is leased.
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<PoolBuffer>(b, [self](PoolBuffer* p) { self->give_back(p); });
}

void BufferPool::give_back(PoolBuffer* b) {
  std::vector<PoolBuffer*> to_free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.leased_bytes -= int64_t(b->capacity);
    idle_.push_back(b);
    stats_.idle_bytes += int64_t(b->capacity);
    // Keep the largest max_idle_ buffers (they serve any smaller request).
    std::sort(idle_.begin(), idle_.end(), [](PoolBuffer* x, PoolBuffer* y) { return x->capacity > y->capacity; });
    while (idle_.size() > max_idle_) {
      to_free.push_back(idle_.back());
      stats_.idle_bytes -= int64_t(idle_.back()->capacity);
      idle_.pop_back();
    }
  }
  for (PoolBuffer* p : to_free) {
    allocator_for(device_).deallocate(p->data, p->capacity);
    delete p;
  }
}

void BufferPool::trim() {
  std::vector<PoolBuffer*> to_free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_free.swap(idle_);
    stats_.idle_bytes = 0;
  }
  for (PoolBuffer* p : to_free) {
    allocator_for(device_).deallocate(p->data, p->capacity);
    delete p;
  }
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace diffq::offload
