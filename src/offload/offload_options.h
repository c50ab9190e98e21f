// The arguments of Diffusers' enable_group_offload / apply_group_offloading, with Diffusers' names and
// defaults, and their validation (Diffusers' error messages).
//
// CPU-only machines: the onload device is the RAM working set and the offload home is a disk file
// (offload_to_disk_path); `use_stream` then switches on the prefetch thread (the CPU's "stream"). A
// host home with a CPU onload device moves no bytes (as in Diffusers on CPU) but runs the same hooks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "diffq/device.h"

namespace diffq::offload {

enum class OffloadType { block_level, leaf_level };
std::string_view offload_type_name(OffloadType t);
OffloadType parse_offload_type(std::string_view s);  // "block_level" | "leaf_level", else Diffusers' error

struct GroupOffloadOptions {
  Device onload_device = Device::cpu();
  Device offload_device = Device::cpu();
  OffloadType offload_type = OffloadType::block_level;
  std::optional<int64_t> num_blocks_per_group;  // required for block_level
  bool non_blocking = false;
  bool use_stream = false;     // prefetch the next group while the current one computes
  bool record_stream = false;  // CUDA only: record_stream on the onloaded tensors (needs use_stream)
  bool low_cpu_mem_usage = false;  // CUDA: pin on the fly instead of keeping pinned copies
  std::filesystem::path offload_to_disk_path;  // empty: the home is host memory
  // diffq: mixed into the disk files' content key (the model's config.json, the quantization config),
  // so a file written under another config is never loaded.
  std::string config_fingerprint;
  // diffq: with a disk home, drop the group files' pages from the OS page cache after each read
  // (posix_fadvise DONTNEED), so offloaded weights hold no RAM between uses and every onload reads the
  // device, as on a machine whose RAM cannot cache the model. Slower when RAM is plentiful; same results.
  bool drop_page_cache = false;
};

// Throws diffq::Error with Diffusers' message for each invalid combination.
void validate_group_offload_options(const GroupOffloadOptions& o);

}  // namespace diffq::offload
