#include "offload/offload_hook.h"

#include <vector>

namespace diffq::offload {

std::string_view offload_kind_name(OffloadKind k) {
  switch (k) {
    case OffloadKind::group: return "group offloading";
    case OffloadKind::sequential: return "sequential CPU offloading";
    case OffloadKind::model: return "model CPU offloading";
  }
  return "?";
}

std::optional<OffloadKind> active_offload(const Module& m) {
  for (const auto& [name, sub] : m.named_modules())
    for (const auto& h : sub->hooks())
      if (const auto* oh = dynamic_cast<const OffloadHook*>(h.get())) return oh->kind();
  return std::nullopt;
}

void remove_offload_hooks(Module& m) {
  for (const auto& [name, sub] : m.named_modules()) {
    std::vector<const ModuleHook*> doomed;
    for (const auto& h : sub->hooks())
      if (dynamic_cast<const OffloadHook*>(h.get())) doomed.push_back(h.get());
    for (const ModuleHook* h : doomed) sub->remove_hook(h);
  }
}

}  // namespace diffq::offload
