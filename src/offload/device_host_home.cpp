#include "offload/device_host_home.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/device_interface.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "offload/param_group.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";

class DeviceHostHome final : public GroupHome {
 public:
  DeviceHostHome(Device d, bool low_mem, backend::DeviceInterface& dev) : device_(d), low_mem_(low_mem), dev_(dev) {}
  ~DeviceHostHome() override {
    if (host_ && !low_mem_) dev_.free_pinned(host_);
    if (host_ && low_mem_) std::free(host_);
  }

  void adopt(ParamGroup& g) override {
    const size_t n = std::max<size_t>(g.packed_bytes(), 1);
    if (low_mem_) {
      host_ = std::aligned_alloc(64, (n + 63) / 64 * 64);
      check(host_ != nullptr, kCtx, "group '", g.id(), "': out of host memory (", n, " bytes)");
    } else {
      host_ = dev_.alloc_pinned(n, device_.index);
    }
    g.pack_into(host_);
    release(g);
  }

  std::shared_ptr<PoolBuffer> fetch(const ParamGroup& g, BufferPool& pool) override {
    auto buf = pool.acquire(g.packed_bytes());
    // A buffer fresh from the allocator has no fence of its own, but its memory may have been another
    // buffer's (the pool frees idle buffers beyond its limit) that queued kernels still read: the copy
    // waits for everything queued on the compute stream so far.
    const std::shared_ptr<void> wait = buf->fence ? buf->fence : dev_.record_fence(device_.index);
    dev_.upload_on_side_stream(device_.index, buf->data, host_, g.packed_bytes(), wait);
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
    if (buf) buf->fence = dev_.record_fence(device_.index);
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
  backend::DeviceInterface& dev_;
  void* host_ = nullptr;
  std::mutex mu_;
  std::weak_ptr<PoolBuffer> onloaded_;
};
}  // namespace

std::unique_ptr<GroupHome> make_device_host_home(Device onload_device, bool low_cpu_mem_usage) {
  check(!onload_device.is_cpu(), kCtx, "make_device_host_home: ", onload_device.str(), " is not an accelerator");
  backend::require_device(onload_device, kCtx);
  return std::make_unique<DeviceHostHome>(onload_device, low_cpu_mem_usage,
                                          *backend::device_interface(onload_device.kind));
}

}  // namespace diffq::offload
