// Where a tensor's bytes live: the host CPU or a CUDA device.
#pragma once

#include <string>
#include <string_view>

namespace diffq {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::cuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device&) const = default;

  std::string str() const;                  // "cpu", "cuda:0"
  static Device parse(std::string_view s);  // "cpu", "cuda", "cuda:1"; throws Error on others
};

}  // namespace diffq
