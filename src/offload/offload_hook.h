// The base of every hook the offload engine attaches (Module::call runs them), so that the kind of
// offloading active on a module tree can be found (Diffusers' _is_group_offload_enabled and
// accelerate's _hf_hook checks) and every offload hook removed at once.
#pragma once

#include <optional>
#include <string_view>

#include "modules/module.h"

namespace diffq::offload {

enum class OffloadKind { group, sequential, model };
std::string_view offload_kind_name(OffloadKind k);  // "group offloading", "sequential CPU offloading", ...

class OffloadHook : public ModuleHook {
 public:
  virtual OffloadKind kind() const = 0;
};

// The offloading attached to `m` or any of its submodules (the first found), if any.
std::optional<OffloadKind> active_offload(const Module& m);
// Removes every OffloadHook from `m` and its submodules (other hooks stay).
void remove_offload_hooks(Module& m);

}  // namespace diffq::offload
