// The CUDA device allocator: plain cudaMalloc/cudaFree per device index (never managed memory), with
// the current/peak accounting of diffq::Allocator so memory_stats(Device::cuda(i)) reports it. No
// caching yet: a caching pool (and cudaMallocAsync on streams) replaces the two calls below later.
#include <array>
#include <cstdio>
#include <mutex>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"
#include "diffq/memory.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kMaxDevices = 64;

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}

  void* allocate(size_t nbytes) override {
    DeviceGuard guard(index_);
    void* p = nullptr;
    // cudaMalloc(0) returns nullptr; a real (tiny) block keeps allocate/deallocate symmetric.
    const cudaError_t err = cudaMalloc(&p, nbytes == 0 ? 1 : nbytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      const MemoryStats s = stats();
      fail("memory", "cuda:", index_, ": cudaMalloc of ", nbytes, " bytes failed: ",
           cudaGetErrorString(err), " (", cudaGetErrorName(err), "); diffq holds ", s.current_bytes,
           " bytes on this device (peak ", s.peak_bytes, ")");
    }
    record_alloc(nbytes);
    return p;
  }

  // Called from Storage destructors: must not throw. At process exit the runtime may already be
  // unloaded (cudaErrorCudartUnloading), which is harmless; anything else is reported on stderr.
  void deallocate(void* p, size_t nbytes) override {
    record_free(nbytes);
    int previous = -1;  // a non-throwing DeviceGuard
    const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != index_ &&
                               cudaSetDevice(index_) == cudaSuccess;
    const cudaError_t err = cudaFree(p);
    if (switch_device) cudaSetDevice(previous);
    if (err != cudaSuccess && err != cudaErrorCudartUnloading)
      std::fprintf(stderr, "[memory] cuda:%d: cudaFree failed: %s (%s)\n", index_,
                   cudaGetErrorString(err), cudaGetErrorName(err));
    if (err != cudaSuccess) cudaGetLastError();
  }

  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

Allocator& device_allocator(int index) {
  require_device(Device::cuda(index));
  check(index < kMaxDevices, "memory", "cuda:", index, " is beyond the ", kMaxDevices,
        " devices diffq supports");
  // Never destroyed: tensors freed during static destruction may still deallocate through them.
  static std::array<CudaAllocator*, kMaxDevices> allocators{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!allocators[index]) allocators[index] = new CudaAllocator(index);
  return *allocators[index];
}

}  // namespace diffq::backend::cuda
