// A ParamGroup: the unit of residency. Its parameters' Storage objects ("slots", each moved whole,
// quantized weights as their packed tensors) travel together between the group's home (host memory
// or a disk file) and the onload device, laid out back to back (64-byte aligned) in one buffer, so an
// onload is a single read or copy. Moving never changes the module tree: bytes are swapped inside the
// same Storage objects (Storage::take_bytes_from).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "modules/module.h"
#include "offload/buffer_pool.h"
#include "offload/content_hash.h"

namespace diffq::offload {

class GroupHome;

struct StorageSlot {
  std::string key;  // parameter name ("blocks.0.attn.to_q.weight"; packed tensor i of a quantized one: "...#i")
  std::shared_ptr<Storage> storage;
  size_t nbytes = 0;
  size_t offset = 0;  // in the packed layout
};

inline constexpr size_t kSlotAlign = 64;

class ParamGroup {
 public:
  ParamGroup(std::string id, std::vector<Module*> modules,
             std::vector<std::pair<std::string, Parameter*>> params);
  ~ParamGroup();

  const std::string& id() const { return id_; }
  const std::vector<Module*>& modules() const { return modules_; }
  const std::vector<std::pair<std::string, Parameter*>>& params() const { return params_; }
  const std::vector<StorageSlot>& slots() const { return slots_; }
  size_t packed_bytes() const { return packed_bytes_; }  // the size of one onloaded copy

  // Hash of the slot names, sizes, parameter shapes/dtypes/schemes, `fingerprint`, and every byte
  // (read from the slots' storages, or from `packed`, a copy in the packed layout, e.g. a file).
  Hash128 content_key(std::string_view fingerprint, const uint8_t* packed = nullptr) const;
  // Copies the slots' current bytes into `dst` (packed layout, zero padding).
  void pack_into(void* dst) const;
  // Onload: points every slot's Storage at its place in `buf` (packed layout); the buffer stays
  // leased while any of them points into it.
  void attach(const std::shared_ptr<PoolBuffer>& buf);
  void set_residency(Residency r);

  GroupHome& home() const { return *home_; }
  void set_home(std::unique_ptr<GroupHome> h);
  bool onloaded = false;

 private:
  std::string id_;
  std::vector<Module*> modules_;
  std::vector<std::pair<std::string, Parameter*>> params_;
  std::vector<StorageSlot> slots_;
  size_t packed_bytes_ = 0;
  std::unique_ptr<GroupHome> home_;
};

}  // namespace diffq::offload
