// The CUDA runtime as the rest of the CUDA backend sees it: every cudaError becomes a diffq::Error that
// names the call, the device and the runtime's own words; device presence is checked once, up front,
// so a machine without a GPU gets "no CUDA device present" instead of an obscure driver error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "diffq/device.h"

namespace diffq::backend::cuda {

// Throws Error("[cuda] <what> on cuda:N failed: <cudaGetErrorString> (<cudaGetErrorName>)") unless ok.
void check_cuda(cudaError_t err, std::string_view what, int device);

// Number of visible CUDA devices; 0 when there is no device or no usable driver (never throws).
int device_count();

// The visible devices (name, compute capability, memory); none with *why_none saying why (the
// runtime's words: no driver, no device).
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int64_t memory_bytes = 0;
};
std::vector<DeviceInfo> list_devices(std::string* why_none);

// Largest power of two (at most 256) dividing the address: cuBLASLt's heuristic and cuDNN's tensors
// assume aligned operands (256 and 16 bytes) unless told otherwise, so callers check or pass it.
inline int64_t address_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && a % uint64_t(al) != 0) al >>= 1;
  return al;
}

// "runtime 13.0, driver 13.0 (or: no driver), cuBLASLt 130100": what `diffq info` prints as the CUDA
// libraries found; never throws.
std::string library_versions_description();

// Throws a clear Error unless `d` names a CUDA device present on this machine.
void require_device(Device d);

// Makes `index` the current device for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The stream this thread's device work is queued on: every kernel launch, cuBLASLt matmul, cuDNN
// execution and device-side copy of the backend passes it. The legacy default stream (0) unless a
// StreamScope is active (a CUDA graph being captured, src/backend/cuda/graph_capture.cpp).
cudaStream_t current_stream();

// Throws Error("[cuda] <what> ... cannot be part of a CUDA graph") while this thread's current stream is
// being captured: called before anything that waits on the host (a read-back, a synchronous copy, an
// upload from host memory the graph could not own), so a capture that meets one is abandoned cleanly
// and its work runs eagerly instead (src/backend/cuda/graph_capture.cpp).
void refuse_in_capture(std::string_view what);

// Makes `s` this thread's current stream for the scope, restoring the previous one after.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t s);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace diffq::backend::cuda
