// One device interface per device kind: what the layers above the backends may ask of a device (is it
// there, its allocator, wait for its work) without naming a backend. The CPU's is always registered;
// the CUDA backend registers its own (src/backend/register_backends.cpp is the one place that knows
// which backends this build has). Tests register a fake one to run a whole pipeline on a "device"
// host-side (tests/pipelines/fake_device.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "diffq/device.h"
#include "diffq/dtype.h"
#include "diffq/memory.h"

namespace diffq::backend {

// Device work recorded once and replayed (a CUDA graph): replay() queues the recorded kernels again, on
// the same addresses, after the work queued so far and before what is queued next.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;
};

class DeviceInterface {
 public:
  virtual ~DeviceInterface() = default;
  // Devices of this kind present now; 0 with *why_none saying why (the runtime's words). Never throws.
  virtual int device_count(std::string* why_none) const = 0;
  // The allocator of device `index` (created on first use).
  virtual Allocator& allocator(int index) = 0;
  // Blocks until every queued operation on device `index` finished (timings, handing results out).
  virtual void synchronize(int index) = 0;

  // ---- what offloading needs (src/offload/device_host_home.cpp) ----
  // Page-locked host memory for fast asynchronous uploads (nullptr-free: throws when refused).
  virtual void* alloc_pinned(size_t nbytes, int index) = 0;
  virtual void free_pinned(void* p) = 0;
  // Bytes diffq could hold on device `index` now: what the device has free plus what diffq's allocator
  // keeps cached there (reusable once the weights placed there go home); -1 when unknown. For the
  // memory-budget planner's `--max-memory auto`.
  virtual int64_t memory_available(int index);
  // Whether this device's convolutions of `dtype` run faster on channels-last images than on [N, C, H, W]
  // (ops::prefers_channels_last). Either layout computes the same values; false unless a backend says so.
  virtual bool prefers_channels_last(DType dtype) const;
  // A fence: an event recorded now on device `index`'s compute stream (its kernels queued so far).
  virtual std::shared_ptr<void> record_fence(int index) = 0;
  // Copies host -> device on device `index`'s transfer stream after `wait` (a fence, may be empty) and
  // returns when the copy is done; the compute stream's kernels queued after the return see the bytes.
  virtual void upload_on_side_stream(int index, void* dst, const void* src, size_t nbytes,
                                     const std::shared_ptr<void>& wait) = 0;

  // ---- what compile's reduce-overhead mode needs (src/compile/device_graphs.cpp) ----
  // Records the device work `body` queues on device `index` without running it, for replay. The tensors
  // `body` makes come from the device's graph pool, which every capture of the device shares (captured
  // work of one device must replay one at a time); each must be gone when `body` returns: the graph's
  // buffers are then free for other captures and are written only by replays. Returns nullptr, with
  // *why, when the device cannot capture, when `body` throws, or when it queued something a capture
  // cannot hold (a read-back to the host, an upload, an op run off the capturing stream) or kept a
  // tensor it made: nothing it queued ever runs then, and the caller runs its work eagerly.
  virtual std::unique_ptr<CapturedWork> capture(int index, const std::function<void()>& body, std::string* why);
};

// Registers backends once (idempotent, thread-safe): every entry point below calls it.
void ensure_backends_registered();

// The interface of a device kind; nullptr when this build has no backend for it.
DeviceInterface* device_interface(DeviceKind k);
// Replaces the interface of `k` (a test's fake, after the backends registered); returns the previous one.
DeviceInterface* set_device_interface(DeviceKind k, DeviceInterface* d);
// The backends' own registration, called once from ensure_backends_registered (register_backends.cpp).
void register_device_interface(DeviceKind k, DeviceInterface* d);

// Throws a clear Error, prefixed `[ctx]`, unless `d` is a device this build and machine can run:
// "this build of diffq has no CUDA backend (...)", "no CUDA device present (...)", "only N present".
void require_device(Device d, std::string_view ctx);

}  // namespace diffq::backend
