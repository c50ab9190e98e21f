#include "offload/pipeline_offloader.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "diffq/error.h"

#include "backend/device_interface.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";

NamedModules present(const NamedModules& c) {
  NamedModules out;
  for (const auto& [n, m] : c)
    if (m) out.emplace_back(n, m);
  return out;
}

std::vector<std::string> split_seq(std::string_view seq) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= seq.size()) {
    const size_t arrow = seq.find("->", start);
    std::string_view part = seq.substr(start, arrow == std::string_view::npos ? std::string_view::npos : arrow - start);
    if (!part.empty()) out.emplace_back(part);
    if (arrow == std::string_view::npos) break;
    start = arrow + 2;
  }
  return out;
}
}  // namespace

std::optional<Device> default_accelerator() {
  const backend::DeviceInterface* cuda = backend::device_interface(DeviceKind::cuda);
  if (cuda && cuda->device_count(nullptr) > 0) return Device::cuda(0);
  return std::nullopt;
}

bool PipelineOffloader::has_group_offload() const {
  for (const auto& [n, g] : groups_)
    if (g->kind() == OffloadKind::group) return true;
  return false;
}

void PipelineOffloader::refuse_if_group_offload_active() const {
  check(!has_group_offload(), kCtx,
        "You are trying to apply model/sequential CPU offloading to a pipeline that contains components with group "
        "offloading enabled. This is not supported. Please disable group offloading for components of the pipeline "
        "to use other offloading methods.");
}

void PipelineOffloader::enable_model_cpu_offload(const NamedModules& components, std::string_view seq_str,
                                                 std::optional<Device> device, const std::filesystem::path& disk) {
  refuse_if_group_offload_active();
  check(!seq_str.empty(), kCtx,
        "Model CPU offload cannot be enabled because no `model_cpu_offload_seq` class attribute is set.");
  remove_all_hooks();
  if (!device) device = default_accelerator();
  check(device.has_value(), kCtx, "`enable_model_cpu_offload` requires accelerator, but not found");
  const NamedModules comps = present(components);
  NamedModules seq, others;
  std::set<std::string> in_seq;
  for (const auto& name : split_seq(seq_str)) {
    in_seq.insert(name);
    for (const auto& [n, m] : comps)
      if (n == name) seq.emplace_back(n, m);
  }
  for (const auto& [n, m] : comps)
    if (!in_seq.count(n)) others.emplace_back(n, m);
  model_ = ModelOffloadChain::apply(seq, others, {.device = *device, .offload_to_disk_path = disk, .config_fingerprint = ""});
  last_components_ = comps;
}

void PipelineOffloader::enable_sequential_cpu_offload(const NamedModules& components, std::optional<Device> device,
                                                      const std::filesystem::path& disk) {
  refuse_if_group_offload_active();
  remove_all_hooks();
  if (!device) device = default_accelerator();
  check(device.has_value(), kCtx, "`enable_sequential_cpu_offload` requires accelerator, but not found");
  GroupOffloadOptions o;
  o.onload_device = *device;
  o.offload_type = OffloadType::leaf_level;
  o.offload_to_disk_path = disk;
  for (const auto& [n, m] : present(components)) {
    o.config_fingerprint = n;
    groups_[n] = GroupOffloader::apply(*m, o, OffloadKind::sequential);
  }
  last_components_ = present(components);
}

void PipelineOffloader::enable_group_offload(const NamedModules& components, const GroupOffloadOptions& o,
                                             const std::vector<std::string>& exclude) {
  validate_group_offload_options(o);
  const NamedModules comps = present(components);
  std::set<std::string> names;
  for (const auto& [n, m] : comps) names.insert(n);
  std::string unknown;
  for (const auto& e : exclude)
    if (!names.count(e)) unknown += (unknown.empty() ? "" : ", ") + e;
  if (!unknown.empty())
    std::fprintf(stderr, "[offload] The following modules are not present in pipeline: %s. Ignore if this is expected.\n",
                 unknown.c_str());
  check(!model_, kCtx,
        "Cannot apply group offloading to a module that is already applying an alternative offloading strategy from "
        "Accelerate. If you want to apply group offloading, please disable the existing offloading strategy first. "
        "(model CPU offload is on)");
  for (const auto& [n, m] : comps) {
    if (std::find(exclude.begin(), exclude.end(), n) != exclude.end()) {
      for (auto& [pn, p] : m->named_parameters())
        if (p->defined()) p->move_to(o.onload_device);
      continue;
    }
    check(!groups_.count(n) || groups_.at(n)->kind() == OffloadKind::group, kCtx,
          "Cannot apply group offloading to a module that is already applying an alternative offloading strategy "
          "from Accelerate. If you want to apply group offloading, please disable the existing offloading strategy "
          "first. (", n, " has sequential CPU offloading)");
    check(!groups_.count(n), kCtx, "component '", n, "' already has group offloading; remove_all_hooks() first");
    GroupOffloadOptions oc = o;
    oc.config_fingerprint = o.config_fingerprint + "|" + n + "|" + m->type_name();
    groups_[n] = GroupOffloader::apply(*m, oc, OffloadKind::group);
  }
  last_components_ = comps;
}

void PipelineOffloader::maybe_free_model_hooks() {
  if (model_) model_->offload_all();
}

void PipelineOffloader::remove_all_hooks() {
  if (model_) model_->remove();
  model_.reset();
  for (auto& [n, g] : groups_) g->remove();
  groups_.clear();
}

}  // namespace diffq::offload
