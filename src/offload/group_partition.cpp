#include "offload/group_partition.h"

#include <set>

#include "diffq/error.h"

namespace diffq::offload {

namespace {
using NamedParams = std::vector<std::pair<std::string, Parameter*>>;

void append_params(const std::string& prefix, const Module& m, NamedParams& out) {
  for (auto& [n, p] : m.named_parameters()) out.emplace_back(prefix.empty() ? n : prefix + "." + n, p);
}
}  // namespace

Partition partition_block_level(Module& root, int64_t n) {
  check(n >= 1, "offload", "num_blocks_per_group must be >= 1, got ", n);
  Partition part;
  NamedParams loose;
  std::vector<Module*> unmatched;
  for (const auto& [own_name, p] : root.own_parameters()) loose.emplace_back(own_name, p);
  for (const auto& [name, child] : root.children()) {
    if (child->type_name() != "ModuleList") {
      unmatched.push_back(child);
      append_params(name, *child, loose);
      continue;
    }
    const auto& blocks = child->children();
    for (size_t i = 0; i < blocks.size(); i += size_t(n)) {
      const size_t last = std::min(blocks.size(), i + size_t(n)) - 1;
      std::vector<Module*> mods;
      NamedParams params;
      for (size_t j = i; j <= last; ++j) {
        mods.push_back(blocks[j].second);
        append_params(name + "." + blocks[j].first, *blocks[j].second, params);
      }
      part.groups.push_back(std::make_unique<ParamGroup>(
          name + "_" + std::to_string(i) + "_" + std::to_string(last), std::move(mods), std::move(params)));
    }
  }
  if (!loose.empty() || !unmatched.empty()) {
    part.resident = int(part.groups.size());
    part.groups.push_back(
        std::make_unique<ParamGroup>(root.type_name() + "_unmatched_group", std::move(unmatched), std::move(loose)));
  }
  (void)root.named_parameters();  // Module::named_parameters renames to relative names; restore full ones
  return part;
}

Partition partition_leaf_level(Module& root) {
  Partition part;
  for (const auto& [name, m] : root.named_modules()) {
    if (m->own_parameters().empty()) continue;
    NamedParams params;
    for (const auto& [pn, p] : m->own_parameters()) params.emplace_back(name.empty() ? pn : name + "." + pn, p);
    part.groups.push_back(std::make_unique<ParamGroup>(name, std::vector<Module*>{m}, std::move(params)));
  }
  (void)root.named_parameters();  // Module::named_parameters renames to relative names; restore full ones
  return part;
}

Partition partition_whole(Module& root, const std::string& whole_id) {
  Partition part;
  NamedParams params;
  append_params("", root, params);
  part.groups.push_back(std::make_unique<ParamGroup>(whole_id, std::vector<Module*>{&root}, std::move(params)));
  (void)root.named_parameters();  // Module::named_parameters renames to relative names; restore full ones
  return part;
}

}  // namespace diffq::offload
