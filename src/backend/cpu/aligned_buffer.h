// A grow-only, 64-byte aligned buffer of T, kept by a kernel between calls (one per thread, thread_local):
// no allocation, page faults or zero-fill per call once it has grown to the largest size asked for.
#pragma once

#include <cstddef>

#include <hwy/aligned_allocator.h>

namespace diffq::backend::cpu {

template <class T>
class AlignedBuffer {
 public:
  // At least n elements (and at least one), uninitialised beyond what earlier calls wrote.
  T* get(size_t n) {
    if (n == 0) n = 1;
    if (n > size_) {
      buf_ = hwy::AllocateAligned<T>(n);
      size_ = n;
    }
    return buf_.get();
  }

 private:
  hwy::AlignedFreeUniquePtr<T[]> buf_;
  size_t size_ = 0;
};

}  // namespace diffq::backend::cpu
