#include "offload/device_staging.h"

#include <algorithm>
#include <map>
#include <string>

#include "backend/device_interface.h"
#include "diffq/error.h"

namespace diffq::offload {

namespace {
backend::DeviceInterface& interface_of(Device d) {
  check(!d.is_cpu(), "offload", "a staging buffer uploads to an accelerator, not ", d.str());
  backend::require_device(d, "offload");
  return *backend::device_interface(d.kind);
}
}  // namespace

DeviceStaging::DeviceStaging(Device device) : device_(device), dev_(interface_of(device)) {
  pinned_ = dev_.alloc_pinned(kChunk, device_.index);
}

std::shared_ptr<DeviceStaging> DeviceStaging::of(Device device) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<DeviceStaging>> live;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = live[device.str()];
  auto s = w.lock();
  if (!s) w = s = std::make_shared<DeviceStaging>(device);
  return s;
}

DeviceStaging::~DeviceStaging() {
  if (pinned_) dev_.free_pinned(pinned_);
}

std::shared_ptr<void> DeviceStaging::fence() { return dev_.record_fence(device_.index); }

void DeviceStaging::upload(void* dst, size_t n, const std::function<void(void*, size_t, size_t)>& read,
                           const std::shared_ptr<void>& wait) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t len = std::min(kChunk, n - off);
    read(pinned_, off, len);
    // Each upload returns when its copy is done: the buffer is free for the next chunk.
    dev_.upload_on_side_stream(device_.index, static_cast<uint8_t*>(dst) + off, pinned_, len, wait);
  }
}

}  // namespace diffq::offload
