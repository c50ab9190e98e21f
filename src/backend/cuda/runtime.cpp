#include "backend/cuda/runtime.h"

#include <cublasLt.h>

#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {
struct Probe {
  int count = 0;
  cudaError_t err = cudaSuccess;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    r.err = cudaGetDeviceCount(&r.count);
    if (r.err != cudaSuccess) {
      r.count = 0;
      cudaGetLastError();  // clear the recorded error so later calls start clean
    }
    return r;
  }();
  return p;
}
}  // namespace

void check_cuda(cudaError_t err, std::string_view what, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // reset the non-sticky error state
  fail("cuda", what, " on cuda:", device, " failed: ", cudaGetErrorString(err), " (",
       cudaGetErrorName(err), ")");
}

int device_count() { return probe().count; }

std::string library_versions_description() {
  const auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int runtime = 0, driver = 0;
  std::string out = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? "runtime " + ver(runtime) : "runtime ?";
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) out += ", driver " + ver(driver);
  else out += ", no CUDA driver";
  cudaGetLastError();
  out += ", cuBLASLt " + std::to_string(cublasLtGetVersion());
  return out;
}

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  const Probe& p = probe();
  std::vector<DeviceInfo> out;
  if (p.err != cudaSuccess) {
    if (why_none) *why_none = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(p.err) + " (" + cudaGetErrorName(p.err) + ")";
    return out;
  }
  if (p.count == 0 && why_none) *why_none = "cudaGetDeviceCount found no CUDA device";
  for (int i = 0; i < p.count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    out.push_back({i, prop.name, prop.major, prop.minor, int64_t(prop.totalGlobalMem)});
  }
  return out;
}

void require_device(Device d) {
  check(d.is_cuda(), "cuda", "expected a CUDA device, got ", d.str());
  const Probe& p = probe();
  if (p.err != cudaSuccess)
    fail("cuda", "device ", d.str(), " requested but no CUDA device present (cudaGetDeviceCount: ",
         cudaGetErrorString(p.err), ", ", cudaGetErrorName(p.err), ")");
  check(p.count > 0, "cuda", "device ", d.str(), " requested but no CUDA device present");
  check(d.index >= 0 && d.index < p.count, "cuda", "device ", d.str(), " requested but only ",
        p.count, " CUDA device(s) present");
}

DeviceGuard::DeviceGuard(int index) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", index);
  if (previous_ != index) check_cuda(cudaSetDevice(index), "cudaSetDevice", index);
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0)
    cudaSetDevice(previous_);
}

namespace {
thread_local cudaStream_t t_current_stream = nullptr;
}  // namespace

cudaStream_t current_stream() { return t_current_stream; }

void refuse_in_capture(std::string_view what) {
  if (t_current_stream == nullptr) return;  // the legacy stream is never captured
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(t_current_stream, &st) != cudaSuccess) cudaGetLastError();
  if (st != cudaStreamCaptureStatusNone)
    fail("cuda", what, " waits on the host (a read-back or a host copy): it cannot be part of a CUDA graph");
}

StreamScope::StreamScope(cudaStream_t s) : previous_(t_current_stream) { t_current_stream = s; }
StreamScope::~StreamScope() { t_current_stream = previous_; }

}  // namespace diffq::backend::cuda
