// Where an offloaded group's bytes live between uses, and how they come back to the onload device.
//   HostHome    the bytes stay in host memory; with a CPU onload device nothing moves (Diffusers on CPU).
//   DiskHome    a hash-keyed safetensors file (disk_home.h): onload reads it into a pool buffer.
//   DeviceHostHome pinned host copies uploaded on the device's transfer stream (device_host_home.h).
#pragma once

#include <memory>

#include "modules/parameter.h"
#include "offload/buffer_pool.h"

namespace diffq::offload {

class ParamGroup;

class GroupHome {
 public:
  virtual ~GroupHome() = default;
  // Setup: takes the group's current bytes into the home and leaves the group offloaded.
  virtual void adopt(ParamGroup& g) = 0;
  // The group's packed bytes on the onload device, or nullptr when its storages already hold them
  // there. Thread-safe: the prefetch thread calls it.
  virtual std::shared_ptr<PoolBuffer> fetch(const ParamGroup& g, BufferPool& pool) = 0;
  // Offload (main thread): re-points the group's storages at the home; the onloaded copy is dropped.
  virtual void release(ParamGroup& g) = 0;
  // Removal of offloading: the bytes go back into ordinary host memory for good.
  virtual void restore(ParamGroup& g) = 0;
  virtual Residency home_residency() const = 0;
  virtual Residency onloaded_residency() const = 0;
  virtual bool moves_bytes() const { return true; }  // false: onload/offload leave residency alone
};

class HostHome final : public GroupHome {
 public:
  void adopt(ParamGroup&) override {}
  std::shared_ptr<PoolBuffer> fetch(const ParamGroup&, BufferPool&) override { return nullptr; }
  void release(ParamGroup&) override {}
  void restore(ParamGroup&) override {}
  Residency home_residency() const override { return Residency::host; }
  Residency onloaded_residency() const override { return Residency::host; }
  bool moves_bytes() const override { return false; }
};

}  // namespace diffq::offload
