#include "offload/offload_spec.h"

#include "diffq/error.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";
constexpr const char* kForms = "none, model, sequential, group[:N], leaf or disk[:path]";
}  // namespace

std::filesystem::path default_offload_dir() { return std::filesystem::temp_directory_path() / "diffq-offload"; }

std::string OffloadSpec::str() const {
  switch (mode) {
    case OffloadMode::none: return "none";
    case OffloadMode::model: return "model";
    case OffloadMode::sequential: return "sequential";
    case OffloadMode::group: return "group:" + std::to_string(blocks_per_group);
    case OffloadMode::leaf: return "leaf";
    case OffloadMode::disk: return disk_path.empty() ? std::string("disk") : "disk:" + disk_path.string();
  }
  return "?";
}

OffloadSpec parse_offload_spec(std::string_view s) {
  OffloadSpec o;
  const size_t colon = s.find(':');
  const std::string_view head = s.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view() : s.substr(colon + 1);
  const bool has_arg = colon != std::string_view::npos;
  if (head == "none" || head == "model" || head == "sequential" || head == "leaf") {
    check(!has_arg, kCtx, "--offload '", s, "': ", head, " takes no argument (expected ", kForms, ")");
    o.mode = head == "none" ? OffloadMode::none
           : head == "model" ? OffloadMode::model
           : head == "sequential" ? OffloadMode::sequential : OffloadMode::leaf;
  } else if (head == "group") {
    o.mode = OffloadMode::group;
    if (has_arg) {
      int64_t n = 0;
      bool ok = !arg.empty() && arg.size() <= 9;
      for (char c : arg) ok = ok && c >= '0' && c <= '9', n = n * 10 + (c - '0');
      check(ok && n >= 1, kCtx, "--offload '", s, "': N must be a positive integer (group:N), got '", arg, "'");
      o.blocks_per_group = n;
    }
  } else if (head == "disk") {
    o.mode = OffloadMode::disk;
    check(!has_arg || !arg.empty(), kCtx, "--offload '", s, "': empty path after disk:");
    if (has_arg) o.disk_path = std::string(arg);
  } else {
    fail(kCtx, "--offload '", s, "' is not one of ", kForms);
  }
  return o;
}

void apply(PipelineOffloader& po, const NamedModules& components, std::string_view seq, const OffloadSpec& spec) {
  po.remove_all_hooks();
  const bool cpu = spec.device.is_cpu();
  const std::filesystem::path dir = spec.disk_path.empty() ? default_offload_dir() : spec.disk_path;
  const bool disk_home = cpu || spec.mode == OffloadMode::disk;
  check(!spec.drop_page_cache || spec.mode == OffloadMode::none || spec.mode == OffloadMode::group ||
            spec.mode == OffloadMode::leaf || spec.mode == OffloadMode::disk,
        kCtx, "dropping the page cache is for group, leaf and disk offloading, not --offload ", spec.str());
  switch (spec.mode) {
    case OffloadMode::none: return;
    case OffloadMode::model: po.enable_model_cpu_offload(components, seq, spec.device, disk_home ? dir : ""); return;
    case OffloadMode::sequential: po.enable_sequential_cpu_offload(components, spec.device, disk_home ? dir : ""); return;
    case OffloadMode::group:
    case OffloadMode::leaf:
    case OffloadMode::disk: {
      GroupOffloadOptions o;
      o.onload_device = spec.device;
      o.offload_type = spec.mode == OffloadMode::leaf ? OffloadType::leaf_level : OffloadType::block_level;
      if (o.offload_type == OffloadType::block_level)
        o.num_blocks_per_group = spec.blocks_per_group;
      if (disk_home) o.offload_to_disk_path = dir;
      o.use_stream = spec.prefetch;
      o.drop_page_cache = spec.drop_page_cache;
      po.enable_group_offload(components, o);
      return;
    }
  }
}

}  // namespace diffq::offload
