// Uploads to an accelerator from bytes that are not page-locked (a disk home's file): read chunk by
// chunk into one page-locked buffer and sent on the device's transfer stream, so offloading to disk on a
// GPU pins a fixed 64 MiB, not the model. One staging buffer per device while any disk home uses it,
// shared by every offloaded component's groups (uploads take turns on it).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "diffq/device.h"

namespace diffq::backend {
class DeviceInterface;
}

namespace diffq::offload {

class DeviceStaging {
 public:
  static constexpr size_t kChunk = size_t(64) << 20;
  // The device's staging buffer: the live one, else a new one pinned now (setup, not per call);
  // `device` must be an accelerator this machine has.
  static std::shared_ptr<DeviceStaging> of(Device device);
  explicit DeviceStaging(Device device);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Fills device bytes [dst, dst + n): `read(buf, offset, len)` writes source bytes [offset, offset + len)
  // into buf, then they are uploaded; the first upload waits on `wait` (a fence of the compute stream:
  // the buffer's last readers), the rest follow it on the transfer stream. Returns when the bytes are on
  // the device.
  void upload(void* dst, size_t n, const std::function<void(void*, size_t, size_t)>& read,
              const std::shared_ptr<void>& wait);
  // A fence recorded now on the device's compute stream (its kernels queued so far).
  std::shared_ptr<void> fence();

 private:
  Device device_;
  backend::DeviceInterface& dev_;
  std::mutex mu_;
  void* pinned_ = nullptr;
};

}  // namespace diffq::offload
