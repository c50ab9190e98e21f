#include "offload/offload_options.h"

#include "diffq/error.h"

namespace diffq::offload {

std::string_view offload_type_name(OffloadType t) {
  return t == OffloadType::block_level ? "block_level" : "leaf_level";
}

OffloadType parse_offload_type(std::string_view s) {
  if (s == "block_level") return OffloadType::block_level;
  if (s == "leaf_level") return OffloadType::leaf_level;
  fail("offload", "'", s, "' is not a valid GroupOffloadingType (expected block_level or leaf_level)");
}

void validate_group_offload_options(const GroupOffloadOptions& o) {
  // Diffusers: streams need an accelerator. diffq's CPU "stream" is the disk prefetch thread.
  check(!o.use_stream || o.onload_device.is_cuda() || !o.offload_to_disk_path.empty(), "offload",
        "Using streams for data transfer requires a CUDA device, or an Intel XPU device. (diffq: on the CPU, "
        "use_stream prefetches from disk and needs offload_to_disk_path)");
  check(o.use_stream || !o.record_stream, "offload", "`record_stream` cannot be True when `use_stream=False`.");
  check(o.offload_type != OffloadType::block_level || o.num_blocks_per_group.has_value(), "offload",
        "`num_blocks_per_group` must be provided when using `offload_type='block_level'.");
  check(!o.num_blocks_per_group || *o.num_blocks_per_group >= 1, "offload",
        "num_blocks_per_group must be >= 1, got ", o.num_blocks_per_group.value_or(0));
  check(o.offload_device.is_cpu(), "offload", "offload_device must be the CPU, got ", o.offload_device.str());
  check(!o.drop_page_cache || !o.offload_to_disk_path.empty(), "offload",
        "drop_page_cache needs a disk home (offload_to_disk_path)");
}

}  // namespace diffq::offload
