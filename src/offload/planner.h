// The memory-budget planner (--max-memory <size> [--max-host-memory <size>]): picks the fastest
// offloading that fits, none > model > group(N, largest N first) > leaf, and predicts its peak.
//
// Working set on the onload device, per mode (each component's forward runs alone; `act` = the
// caller's estimate of the component's activation peak):
//   none        sum(weights) + max(act)
//   model       max_k(weights_k + act_k)
//   group(N)    max_k(unmatched_k + 2 * N * block_k + act_k) + sum_{j != k} idle_j
//               (current + prefetched group; idle_j = the two largest group buffers component j's
//               pool keeps for reuse between its forwards)
//   leaf        max_k(2 * leaf_k + act_k) + sum_{j != k} idle_j
// Home: on a GPU the offloaded weights live in host memory when they fit --max-host-memory, else on
// disk; on the CPU the onload device is the RAM itself, so every offloading mode's home is disk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/offload_spec.h"

namespace diffq::offload {

struct ComponentFootprint {
  std::string name;
  int64_t weight_bytes = 0;     // all parameters (quantized: packed bytes)
  int64_t unmatched_bytes = 0;  // block_level's unmatched group
  int64_t block_bytes = 0;      // largest block of its ModuleLists (0: none -> one unmatched group)
  int64_t num_blocks = 0;       // longest ModuleList
  int64_t leaf_bytes = 0;       // largest module's own parameters
  int64_t activation_bytes = 0; // caller's estimate of the forward's activation peak
};

// Sizes of each component from its module tree (activation_bytes left 0 for the caller).
std::vector<ComponentFootprint> measure_footprints(const NamedModules& components);

struct MemoryBudget {
  int64_t max_memory = 0;                  // the onload device's working set
  std::optional<int64_t> max_host_memory;  // GPU onload: host RAM for the offloaded weights
  Device device = Device::cpu();
};

struct Plan {
  OffloadSpec spec;
  int64_t predicted_peak = 0;       // on the onload device
  int64_t predicted_host = 0;       // host RAM for the homes (GPU onload, host home)
  std::string str() const;          // "group:2 from disk: predicted peak 410 MiB of 512 MiB"
  int64_t budget = 0;
};

// Throws when even leaf offloading cannot fit, naming the smallest budget that would.
Plan plan_memory(const std::vector<ComponentFootprint>& components, const MemoryBudget& budget);

// "512M", "8G", "1.5GiB", "2048" (bytes), "750MB": binary units (K/M/G/T = 2^10..2^40).
int64_t parse_size(std::string_view s);

// The working-set budget of `--max-memory` on `device`, given what the device has available now
// (`available`: free plus diffq's cached bytes, DeviceInterface::memory_available; -1 unknown):
//   "auto"   available minus a headroom of min(512 MiB, available / 10) (CUDA's library workspaces, the
//            graph pool); an error on the CPU or where the device cannot tell;
//   a size   that size, clamped to the same bound when the device has less (the note says so).
// `note` is empty or "; <why>" for the plan's description.
struct DeviceBudget {
  int64_t bytes = 0;
  std::string note;
};
DeviceBudget device_budget(std::string_view max_memory, Device device, int64_t available);

}  // namespace diffq::offload
