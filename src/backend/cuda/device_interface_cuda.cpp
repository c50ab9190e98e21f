// The CUDA backend behind backend::DeviceInterface: presence from the runtime's probe (never throws on a
// machine without a GPU or driver), the per-device allocator, device-wide synchronisation, and what
// offloading needs: page-locked host memory, fences (events on the compute stream) and uploads on one
// non-blocking transfer stream per device.
#include <array>
#include <mutex>

#include "backend/cuda/allocator.h"
#include "backend/cuda/graph_capture.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/device_interface.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {
constexpr int kMaxDevices = 64;

// One non-blocking side stream per device for all transfers (created on first use).
cudaStream_t transfer_stream(int index) {
  static std::mutex mu;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  check(index >= 0 && index < kMaxDevices, "offload", "cuda:", index, " is beyond the ", kMaxDevices,
        " devices diffq supports");
  std::lock_guard<std::mutex> lock(mu);
  if (!streams[size_t(index)]) {
    DeviceGuard guard(index);
    check_cuda(cudaStreamCreateWithFlags(&streams[size_t(index)], cudaStreamNonBlocking), "cudaStreamCreate", index);
  }
  return streams[size_t(index)];
}

class CudaDeviceInterface final : public DeviceInterface {
 public:
  int device_count(std::string* why_none) const override {
    const int n = cuda::device_count();
    if (n == 0 && why_none) list_devices(why_none);
    return n;
  }
  Allocator& allocator(int index) override { return device_allocator(index); }
  void synchronize(int index) override {
    refuse_in_capture("synchronize");
    DeviceGuard guard(index);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", index);
  }
  void* alloc_pinned(size_t nbytes, int index) override {
    void* p = nullptr;
    check_cuda(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable), "cudaHostAlloc", index);
    return p;
  }
  void free_pinned(void* p) override {
    if (p && cudaFreeHost(p) != cudaSuccess) cudaGetLastError();  // never throws (destructors)
  }
  std::shared_ptr<void> record_fence(int index) override {
    refuse_in_capture("an offload fence");
    DeviceGuard guard(index);
    cudaEvent_t ev;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", index);
    check_cuda(cudaEventRecord(ev, 0), "cudaEventRecord", index);  // the compute (legacy default) stream
    return std::shared_ptr<void>(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  }
  void upload_on_side_stream(int index, void* dst, const void* src, size_t nbytes,
                             const std::shared_ptr<void>& wait) override {
    refuse_in_capture("an offload upload");
    DeviceGuard guard(index);
    cudaStream_t s = transfer_stream(index);
    if (wait) check_cuda(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(wait.get()), 0), "cudaStreamWaitEvent", index);
    // No fence: dst may be a fresh allocation, which the caching allocator may have taken from a tensor whose
    // kernels are still queued on the compute stream (allocator.h). The synchronisation below ends this
    // stream's use before the block can be freed, so no record_stream is needed.
    else wait_for_compute_stream(index, s);
    check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync", index);
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize", index);
  }
  int64_t memory_available(int index) override {
    DeviceGuard guard(index);
    size_t free_bytes = 0, total = 0;
    const cudaError_t err = cudaMemGetInfo(&free_bytes, &total);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return int64_t(free_bytes) + caching_pool_stats(index).reserved_bytes;
  }
  std::unique_ptr<CapturedWork> capture(int index, const std::function<void()>& body, std::string* why) override {
    return capture_graph(index, body, why);
  }
};
}  // namespace

DeviceInterface& cuda_device_interface() {
  static CudaDeviceInterface d;
  return d;
}

}  // namespace diffq::backend::cuda
