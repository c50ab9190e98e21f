#include "core/large_block_cache.h"

#include <cstdlib>
#include <vector>

namespace diffq::core {

void* LargeBlockCache::take(size_t n) {
  const size_t want = block_size(n);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it)  // the most recently freed first
    if (it->bytes == want) {
      void* p = it->p;
      bytes_ -= it->bytes;
      blocks_.erase(std::next(it).base());
      return p;
    }
  return nullptr;
}

void LargeBlockCache::put(void* p, size_t n) {
  const size_t bytes = block_size(n);
  std::vector<void*> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.push_back({p, bytes});
    bytes_ += bytes;
    while (bytes_ > capacity_ && !blocks_.empty()) {
      drop.push_back(blocks_.front().p);
      bytes_ -= blocks_.front().bytes;
      blocks_.pop_front();
    }
  }
  for (void* q : drop) std::free(q);
}

void LargeBlockCache::release() {
  std::deque<Block> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(blocks_);
    bytes_ = 0;
  }
  for (const Block& b : all) std::free(b.p);
}

size_t LargeBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace diffq::core
