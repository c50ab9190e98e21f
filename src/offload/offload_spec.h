// The CLI's --offload value and its application through the pipeline-level API:
//   none | model | sequential | group[:N] | leaf | disk[:path]
// On a CPU onload device every mode gets a disk home (a host home would move nothing): `disk_path`,
// else <temp>/diffq-offload. "disk" is block-level group offload (N = 1) from disk with prefetch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "offload/pipeline_offloader.h"

namespace diffq::offload {

enum class OffloadMode { none, model, sequential, group, leaf, disk };

struct OffloadSpec {
  OffloadMode mode = OffloadMode::none;
  int64_t blocks_per_group = 1;   // group[:N]
  std::filesystem::path disk_path;  // disk[:path]; empty: default_offload_dir() when a disk home is used
  bool prefetch = true;           // group/leaf/disk: prefetch the next group (use_stream)
  Device device = Device::cpu();  // the onload device
  bool drop_page_cache = false;   // group/leaf/disk with a disk home: GroupOffloadOptions::drop_page_cache
  std::string str() const;        // "group:2", "disk:/tmp/x", ...
};

std::filesystem::path default_offload_dir();  // <temp>/diffq-offload
// Throws naming the value and the accepted forms.
OffloadSpec parse_offload_spec(std::string_view s);

// Applies `spec` (after removing any offloading already on).
void apply(PipelineOffloader& po, const NamedModules& components, std::string_view model_cpu_offload_seq,
           const OffloadSpec& spec);

}  // namespace diffq::offload
