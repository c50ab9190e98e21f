#include "offload/cuda_home.h"

#include "diffq/error.h"

#ifdef DIFFQ_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>

#include "diffq/memory.h"
#include "offload/param_group.h"
#endif

namespace diffq::offload {

#ifndef DIFFQ_HAS_CUDA

std::unique_ptr<GroupHome> make_cuda_host_home(Device onload_device, bool) {
  fail("offload", "onload device ", onload_device.str(), " requested but this build of diffq has no CUDA backend");
}

#else

namespace {
constexpr const char* kCtx = "offload";

void cuda_ok(cudaError_t e, const char* what, int device) {
  check(e == cudaSuccess, kCtx, what, " on cuda:", device, " failed: ", cudaGetErrorString(e));
}

// One non-blocking side stream per device for all transfers.
cudaStream_t side_stream(int device) {
  static std::mutex mu;
  static cudaStream_t streams[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!streams[device]) {
    cuda_ok(cudaSetDevice(device), "cudaSetDevice", device);
    cuda_ok(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking), "cudaStreamCreate", device);
  }
  return streams[device];
}

class CudaHostHome final : public GroupHome {
 public:
  CudaHostHome(Device d, bool low_mem) : device_(d), low_mem_(low_mem) {}
  ~CudaHostHome() override {
    if (host_ && !low_mem_) cudaFreeHost(host_);
    if (host_ && low_mem_) std::free(host_);
  }

  void adopt(ParamGroup& g) override {
    const size_t n = std::max<size_t>(g.packed_bytes(), 1);
    if (low_mem_) {
      host_ = std::aligned_alloc(64, (n + 63) / 64 * 64);
      check(host_ != nullptr, kCtx, "group '", g.id(), "': out of host memory (", n, " bytes)");
    } else {
      cuda_ok(cudaHostAlloc(&host_, n, cudaHostAllocPortable), "cudaHostAlloc", device_.index);
    }
    g.pack_into(host_);
    release(g);
  }

  std::shared_ptr<PoolBuffer> fetch(const ParamGroup& g, BufferPool& pool) override {
    auto buf = pool.acquire(g.packed_bytes());
    cuda_ok(cudaSetDevice(device_.index), "cudaSetDevice", device_.index);
    cudaStream_t s = side_stream(device_.index);
    if (buf->fence) cuda_ok(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(buf->fence.get()), 0),
                            "cudaStreamWaitEvent", device_.index);
    cuda_ok(cudaMemcpyAsync(buf->data, host_, g.packed_bytes(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync",
            device_.index);
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize", device_.index);
    std::lock_guard<std::mutex> lock(mu_);
    onloaded_ = buf;
    return buf;
  }

  void release(ParamGroup& g) override {
    std::shared_ptr<PoolBuffer> buf;
    {
      std::lock_guard<std::mutex> lock(mu_);
      buf = onloaded_.lock();
      onloaded_.reset();
    }
    if (buf) {
      cudaEvent_t ev;
      cuda_ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", device_.index);
      cuda_ok(cudaEventRecord(ev, 0), "cudaEventRecord", device_.index);  // the compute (legacy) stream
      buf->fence = std::shared_ptr<void>(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    }
    auto* base = static_cast<uint8_t*>(host_);
    for (const auto& s : g.slots()) {
      auto view = Storage::borrow(base + s.offset, s.nbytes, Device::cpu(), nullptr);
      s.storage->take_bytes_from(*view);
    }
  }

  void restore(ParamGroup& g) override {
    auto* base = static_cast<uint8_t*>(host_);
    for (const auto& s : g.slots()) {
      auto fresh = Storage::allocate(s.nbytes, Device::cpu());
      std::memcpy(fresh->data(), base + s.offset, s.nbytes);
      s.storage->take_bytes_from(*fresh);
    }
  }

  Residency home_residency() const override { return low_mem_ ? Residency::host : Residency::pinned; }
  Residency onloaded_residency() const override { return Residency::device; }

 private:
  Device device_;
  bool low_mem_;
  void* host_ = nullptr;
  std::mutex mu_;
  std::weak_ptr<PoolBuffer> onloaded_;
};
}  // namespace

std::unique_ptr<GroupHome> make_cuda_host_home(Device onload_device, bool low_cpu_mem_usage) {
  check(onload_device.is_cuda(), kCtx, "make_cuda_host_home: ", onload_device.str(), " is not a CUDA device");
  return std::make_unique<CudaHostHome>(onload_device, low_cpu_mem_usage);
}

#endif

}  // namespace diffq::offload
