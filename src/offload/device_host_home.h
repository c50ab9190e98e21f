// CudaHostHome: the home of a group whose onload device is a GPU (Diffusers' stream path).
//   adopt    packs the group into one page-locked host buffer (cudaHostAlloc; with low_cpu_mem_usage
//            an ordinary host buffer, pinned per transfer by the driver's staging instead), then
//            re-points the storages at it (Residency::pinned).
//   fetch    (prefetch thread) leases a device buffer from the pool, makes the side stream wait for
//            the buffer's fence (the compute stream's last use of it), cudaMemcpyAsync host->device on
//            the side stream, synchronizes the side stream; the compute stream's next kernels are
//            enqueued only after the future resolves, so the group waits for its copy.
//   release  records a fence event on the compute stream into the onloaded buffer, then re-points the
//            storages at the pinned copy ("offload" moves no bytes: Diffusers' pinned-copy swap).
// In builds without CUDA, make_cuda_host_home throws a clear error.
#pragma once

#include <memory>

#include "diffq/device.h"
#include "offload/group_home.h"

namespace diffq::offload {

std::unique_ptr<GroupHome> make_cuda_host_home(Device onload_device, bool low_cpu_mem_usage);

}  // namespace diffq::offload
