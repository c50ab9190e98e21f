// Pipeline-level offloading (Diffusers' DiffusionPipeline.enable_model_cpu_offload /
// enable_sequential_cpu_offload / enable_group_offload / maybe_free_model_hooks / remove_all_hooks),
// over a list of named components so that any pipeline can use it; FluxPipeline's methods are thin
// calls into this. One kind of offloading at a time, with Diffusers' errors for conflicts.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/group_offloader.h"
#include "offload/model_offload.h"

namespace diffq::offload {

// The accelerator Diffusers' get_device() would pick (cuda:0 when a GPU is present), else nullopt.
std::optional<Device> default_accelerator();

class PipelineOffloader {
 public:
  // `components`: the pipeline's modules by component name (null entries are skipped).
  // `device` nullopt: the default accelerator, else Diffusers' "requires accelerator" error; an
  // explicit CPU device runs the same state machine with the RAM as the working set (diffq). A disk
  // path gives each component a hash-keyed file home.
  void enable_model_cpu_offload(const NamedModules& components, std::string_view model_cpu_offload_seq,
                                std::optional<Device> device, const std::filesystem::path& disk_path = {});
  void enable_sequential_cpu_offload(const NamedModules& components, std::optional<Device> device,
                                     const std::filesystem::path& disk_path = {});
  void enable_group_offload(const NamedModules& components, const GroupOffloadOptions& o,
                            const std::vector<std::string>& exclude_modules = {});
  void maybe_free_model_hooks();  // end of a pipeline call: model offload sends everything home
  void remove_all_hooks();        // every kind off, bytes back in host memory

  bool has_group_offload() const;
  std::shared_ptr<ModelOffloadChain> model_chain() const { return model_; }
  // Group (or sequential) offloaders by component name.
  const std::map<std::string, std::shared_ptr<GroupOffloader>>& group_offloaders() const { return groups_; }

 private:
  void refuse_if_group_offload_active() const;
  std::shared_ptr<ModelOffloadChain> model_;
  std::map<std::string, std::shared_ptr<GroupOffloader>> groups_;
  NamedModules last_components_;
};

}  // namespace diffq::offload
