#include "backend/device_interface.h"

#include <array>
#include <atomic>

#include "diffq/error.h"

namespace diffq::backend {

namespace {
constexpr size_t kKinds = 2;  // DeviceKind::cpu, DeviceKind::cuda
std::array<std::atomic<DeviceInterface*>, kKinds>& table() {
  static std::array<std::atomic<DeviceInterface*>, kKinds> t{};
  return t;
}
size_t slot(DeviceKind k) { return static_cast<size_t>(k); }
}  // namespace

DeviceInterface* device_interface(DeviceKind k) {
  ensure_backends_registered();
  return table()[slot(k)].load();
}

DeviceInterface* set_device_interface(DeviceKind k, DeviceInterface* d) {
  ensure_backends_registered();  // so a later first registration never overwrites a test's fake
  return table()[slot(k)].exchange(d);
}

void register_device_interface(DeviceKind k, DeviceInterface* d) { table()[slot(k)].store(d); }

int64_t DeviceInterface::memory_available(int) { return -1; }
bool DeviceInterface::prefers_channels_last(DType) const { return false; }

std::unique_ptr<CapturedWork> DeviceInterface::capture(int, const std::function<void()>&, std::string* why) {
  if (why) *why = "this device cannot capture its work for replay";
  return nullptr;
}

void require_device(Device d, std::string_view ctx) {
  if (d.is_cpu()) return;
  DeviceInterface* di = device_interface(d.kind);
  check(di != nullptr, ctx, "device ", d.str(),
        " requested but this build of diffq has no CUDA backend (built without nvcc, or with -DDIFFQ_CUDA=OFF)");
  std::string why;
  const int n = di->device_count(&why);
  check(n > 0, ctx, "device ", d.str(), " requested but no CUDA device present",
        why.empty() ? std::string() : " (" + why + ")");
  check(d.index >= 0 && d.index < n, ctx, "device ", d.str(), " requested but only ", n, " CUDA device",
        n == 1 ? " is" : "s are", " present (cuda:0", n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string(),
        ")");
}

}  // namespace diffq::backend
