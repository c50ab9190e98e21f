// Which backends are linked in: the CPU always; CUDA in builds with DIFFQ_HAS_CUDA (nvcc found at
// configure time). Neither call touches a device: a CUDA build starts and runs its CPU paths on a
// machine without a GPU.
#include "backend/register_backends.h"

#include <mutex>

#include "backend/cuda_kernel_rules.h"
#include "backend/device_interface.h"
#include "diffq/error.h"
#include "ops/op.h"
#include "ops/kernel_precondition.h"

namespace diffq::backend {
namespace cpu {
void register_kernels();
bool prefers_channels_last(DType conv_dtype);  // backend/cpu/conv.h
}
#ifdef DIFFQ_HAS_CUDA
namespace cuda {
void register_kernels();
DeviceInterface& cuda_device_interface();  // backend/cuda/device_interface_cuda.cpp
}  // namespace cuda
#endif

namespace {
// The host: always present, its allocator is core's (diffq::allocator_for(Device::cpu())).
class CpuDeviceInterface final : public DeviceInterface {
 public:
  int device_count(std::string*) const override { return 1; }
  Allocator& allocator(int) override { return allocator_for(Device::cpu()); }
  void synchronize(int) override {}
  // The host is no accelerator: offloading onto it goes through its disk home (offload/disk_home.h).
  void* alloc_pinned(size_t, int) override { fail("offload", "the cpu has no pinned memory of its own"); }
  void free_pinned(void*) override {}
  std::shared_ptr<void> record_fence(int) override { return {}; }
  void upload_on_side_stream(int, void*, const void*, size_t, const std::shared_ptr<void>&) override {
    fail("offload", "the cpu has no transfer stream");
  }
  bool prefers_channels_last(DType dtype) const override { return cpu::prefers_channels_last(dtype); }
};
}  // namespace

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CpuDeviceInterface cpu_interface;
    register_device_interface(DeviceKind::cpu, &cpu_interface);
#ifdef DIFFQ_HAS_CUDA
    register_device_interface(DeviceKind::cuda, &cuda::cuda_device_interface());
#endif
  });
}

void register_all_kernels() {
  cpu::register_kernels();
#ifdef DIFFQ_HAS_CUDA
  cuda::register_kernels();
  ops::set_kernel_precondition(DeviceKind::cuda, &cuda_kernel_refuses);
#endif
}

}  // namespace diffq::backend
