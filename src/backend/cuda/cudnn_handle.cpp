// The per-device cuDNN handles (cudnn_handle.h) and the facts cudnn_info.h reports. Compiled in every
// CUDA build: without cuDNN (DIFFQ_HAS_CUDNN unset) only the cudnn_info.h answers remain.
#include "backend/cuda/cudnn_info.h"

#include <array>
#include <cstdlib>
#include <string>

#include "backend/cuda/runtime.h"
#include "diffq/error.h"

#if DIFFQ_HAS_CUDNN
#include "backend/cuda/cudnn_handle.h"
#endif

namespace diffq::backend::cuda {

namespace {

[[maybe_unused]] std::string version_string(size_t v) {  // cuDNN 9 encodes 9.19.0 as 91900
  return cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace

bool sdpa_forced_simple() {
  const char* e = std::getenv("DIFFQ_CUDA_SDPA");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto" || v == "cudnn") return false;
  if (v == "simple") return true;
  fail("sdpa", "cuda: DIFFQ_CUDA_SDPA=", v, " is not one of auto, cudnn, simple");
}

#if DIFFQ_HAS_CUDNN

namespace {
constexpr int kMaxDevices = 16;
}

bool cudnn_built() { return true; }

bool cudnn_runtime_compatible(std::string* why) {
  static const size_t loaded = cudnnGetVersion();
  if (loaded / 10000 == CUDNN_MAJOR) return true;
  if (why)
    *why = cat("the loaded cuDNN is ", version_string(loaded), ", this build needs cuDNN ", CUDNN_MAJOR,
               ".x (compiled against ", version_string(CUDNN_VERSION), ")");
  return false;
}

std::string cudnn_version_description() {
  if (device_count() == 0)
    return cat(version_string(CUDNN_VERSION), " (compiled against; no GPU here to load it)");
  return cat(version_string(cudnnGetVersion()), " (loaded; compiled against ", version_string(CUDNN_VERSION), ")");
}

void check_cudnn(cudnnStatus_t st, std::string_view op, std::string_view what, int device) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  fail(op, "cuda:", device, ": ", what, " failed: ", cudnnGetErrorString(st));
}

CudnnDevice& cudnn_device(int device, std::string_view op) {
  static std::array<CudnnDevice, kMaxDevices> devices;
  static std::mutex mu;
  check(device >= 0 && device < kMaxDevices, op, "cuda: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mu);
  CudnnDevice& d = devices[size_t(device)];
  if (!d.handle) {
    std::string why;
    check(cudnn_runtime_compatible(&why), op, "cuda:", device, ": ", why);
    check_cudnn(cudnnCreate(&d.handle), op, "cudnnCreate", device);
  }
  return d;
}

std::string cuda_sdpa_kernel_description() {
  try {
    if (sdpa_forced_simple()) return "simple warp-per-row kernel (DIFFQ_CUDA_SDPA=simple)";
  } catch (const Error& e) {
    return e.what();  // an unknown DIFFQ_CUDA_SDPA: every CUDA sdpa call fails with this
  }
  return "cuDNN fused flash attention (bf16/fp16, head dims multiples of 8 up to 256, no mask); "
         "the simple warp-per-row kernel otherwise";
}

std::string cuda_conv2d_kernel_description() {
  return "cuDNN convolution graph (+ bias), float32 without TF32";
}

#else  // no cuDNN in this build

bool cudnn_built() { return false; }

std::string cudnn_version_description() { return "not built (CMake found no cuDNN or no cuDNN frontend)"; }

std::string cuda_sdpa_kernel_description() {
  return "simple warp-per-row kernel (built without cuDNN)";
}

std::string cuda_conv2d_kernel_description() { return "none (built without cuDNN)"; }

#endif

}  // namespace diffq::backend::cuda
