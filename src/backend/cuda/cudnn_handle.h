// One cuDNN handle per CUDA device, created on first use (after a DeviceGuard: cudnnCreate binds the
// handle to the current device) and kept for the process, with the mutex its users hold: a cuDNN handle
// must not be used by two threads at once. Work goes to the thread's current stream (runtime.h), set on
// the handle before each execution, as every other CUDA kernel of diffq, so it is ordered after the ops
// that made its inputs.
// Only compiled where CMake found cuDNN and its frontend (DIFFQ_HAS_CUDNN).
#pragma once

#include <cudnn.h>

#include <mutex>
#include <string>
#include <string_view>

namespace diffq::backend::cuda {

struct CudnnDevice {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;  // held while the handle runs a plan
};

// The handle of cuda:`device` (the caller holds a DeviceGuard for it); errors name `op`.
CudnnDevice& cudnn_device(int device, std::string_view op);

// Whether the cuDNN library loaded at run time can serve this build: the same major version as the
// headers it was compiled against (cuDNN keeps its backend API stable within a major version). Else
// *why says what was found.
bool cudnn_runtime_compatible(std::string* why);

// Throws Error("[op] cuda:N: <what> failed: <cudnnGetErrorString>") unless st is CUDNN_STATUS_SUCCESS.
void check_cudnn(cudnnStatus_t st, std::string_view op, std::string_view what, int device);

}  // namespace diffq::backend::cuda
