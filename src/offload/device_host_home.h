// DeviceHostHome: the home of a group whose onload device is an accelerator (Diffusers' stream path),
// through the device's interface (src/backend/device_interface.h), so offloading names no backend.
//   adopt    packs the group into one page-locked host buffer (with low_cpu_mem_usage an ordinary
//            host buffer, pinned per transfer by the driver's staging instead), then re-points the
//            storages at it (Residency::pinned).
//   fetch    (prefetch thread) leases a device buffer from the pool and uploads the group on the
//            device's transfer stream after the buffer's fence (the compute stream's last use of it);
//            the compute stream's next kernels are enqueued only after the future resolves, so the
//            group waits for its copy.
//   release  records a fence on the compute stream into the onloaded buffer, then re-points the
//            storages at the pinned copy ("offload" moves no bytes: Diffusers' pinned-copy swap).
// A device this build or machine cannot run is a clear error when the home is made.
#pragma once

#include <memory>

#include "diffq/device.h"
#include "offload/group_home.h"

namespace diffq::offload {

std::unique_ptr<GroupHome> make_device_host_home(Device onload_device, bool low_cpu_mem_usage);

}  // namespace diffq::offload
