// Model CPU offload (Diffusers' enable_model_cpu_offload): each component is one group, moved whole.
// Hooks are chained in model_cpu_offload_seq order: before component k runs, component k-1 goes back
// to its home and all of k comes to the onload device; k stays until the next one runs (the
// transformer stays through the denoising loop). Components outside the sequence come on first use.
// offload_all() (Diffusers' maybe_free_model_hooks, called at the end of a pipeline call) sends every
// component home.
//
// Homes: host memory (a GPU onload device: pinned copies; a CPU onload device: nothing moves, the
// state machine still runs), or a hash-keyed disk file per component (CPU: the RAM working set then
// holds one component at a time).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offload/buffer_pool.h"
#include "offload/disk_home.h"
#include "offload/param_group.h"

namespace diffq::offload {

struct ModelOffloadOptions {
  Device device = Device::cpu();               // the onload device
  std::filesystem::path offload_to_disk_path;  // empty: host home
  std::string config_fingerprint;
};

using NamedModules = std::vector<std::pair<std::string, Module*>>;

class ModelOffloadChain : public std::enable_shared_from_this<ModelOffloadChain> {
 public:
  // `seq`: the components in model_cpu_offload_seq order; `others`: the rest (no chaining).
  static std::shared_ptr<ModelOffloadChain> apply(const NamedModules& seq, const NamedModules& others,
                                                  const ModelOffloadOptions& o);
  void activate(int k);   // the hook of component k, before its forward
  void offload_all();     // maybe_free_model_hooks
  void remove();          // hooks off, bytes back in ordinary host memory
  bool is_onloaded(const std::string& name) const;
  const std::vector<std::string>& events() const { return events_; }  // "onload <name>", "offload <name>"
  const std::vector<std::unique_ptr<ParamGroup>>& groups() const { return groups_; }
  int64_t max_onloaded_bytes() const { return max_onloaded_bytes_; }

 private:
  ModelOffloadChain() = default;
  void onload(int k);
  void offload(int k);
  std::vector<std::unique_ptr<ParamGroup>> groups_;
  std::vector<Module*> roots_;
  size_t num_chained_ = 0;
  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<DiskFileCounters> disk_ = std::make_shared<DiskFileCounters>();
  std::vector<std::string> events_;
  int64_t max_onloaded_bytes_ = 0;
  bool removed_ = false;
};

}  // namespace diffq::offload
