#include "offload/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "diffq/error.h"
#include "io/mapped_file.h"
#include "offload/group_partition.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";

int64_t bytes_of(const ParamGroup& g) { return int64_t(g.packed_bytes()); }

// The two largest group buffers a component's pool keeps idle between forwards.
int64_t idle_of(const ComponentFootprint& c, bool leaf, int64_t n) {
  if (leaf) return 2 * c.leaf_bytes;
  if (c.block_bytes == 0) return c.unmatched_bytes;
  return std::max(c.unmatched_bytes, n * c.block_bytes) + n * c.block_bytes;
}
}  // namespace

std::vector<ComponentFootprint> measure_footprints(const NamedModules& components) {
  std::vector<ComponentFootprint> out;
  for (const auto& [name, m] : components) {
    if (!m) continue;
    ComponentFootprint f;
    f.name = name;
    Partition blocks = partition_block_level(*m, 1);
    for (size_t i = 0; i < blocks.groups.size(); ++i) {
      f.weight_bytes += int64_t(blocks.groups[i]->packed_bytes());
      if (int(i) == blocks.resident) f.unmatched_bytes = bytes_of(*blocks.groups[i]);
      else f.block_bytes = std::max(f.block_bytes, bytes_of(*blocks.groups[i]));
    }
    for (const auto& [cn, c] : m->children())
      if (c->type_name() == "ModuleList") f.num_blocks = std::max<int64_t>(f.num_blocks, int64_t(c->children().size()));
    for (const auto& g : partition_leaf_level(*m).groups) f.leaf_bytes = std::max(f.leaf_bytes, bytes_of(*g));
    out.push_back(f);
  }
  return out;
}

std::string Plan::str() const {
  const bool disk = spec.mode == OffloadMode::disk || (spec.mode != OffloadMode::none && spec.device.is_cpu());
  std::string s = spec.str();
  if (disk && spec.mode != OffloadMode::disk) s += " from disk";
  s += ": predicted peak " + io::format_bytes(uint64_t(predicted_peak)) + " of " + io::format_bytes(uint64_t(budget)) +
       " on " + spec.device.str();
  if (predicted_host > 0) s += ", host " + io::format_bytes(uint64_t(predicted_host));
  return s;
}

DeviceBudget device_budget(std::string_view max_memory, Device device, int64_t available) {
  const int64_t headroom = available > 0 ? std::min<int64_t>(int64_t(512) << 20, available / 10) : 0;
  const int64_t usable = available - headroom;
  DeviceBudget d;
  if (max_memory == "auto") {
    check(!device.is_cpu(), kCtx, "--max-memory auto reads the GPU's free memory: on the CPU give a size (e.g. 8GiB)");
    check(available > 0, kCtx, "--max-memory auto: ", device.str(), " did not say how much memory it has free");
    d.bytes = usable;
    d.note = "; auto: " + io::format_bytes(uint64_t(available)) + " available on " + device.str() + ", " +
             io::format_bytes(uint64_t(headroom)) + " kept free";
    return d;
  }
  d.bytes = parse_size(max_memory);
  if (available > 0 && d.bytes > usable) {
    d.note = "; --max-memory " + std::string(max_memory) + " clamped to " + io::format_bytes(uint64_t(usable)) +
             ": " + io::format_bytes(uint64_t(available)) + " available on " + device.str();
    d.bytes = usable;
  }
  return d;
}

Plan plan_memory(const std::vector<ComponentFootprint>& cs, const MemoryBudget& b) {
  check(b.max_memory > 0, kCtx, "--max-memory must be positive, got ", b.max_memory);
  int64_t total = 0, max_act = 0;
  for (const auto& c : cs) total += c.weight_bytes, max_act = std::max(max_act, c.activation_bytes);
  Plan p;
  p.budget = b.max_memory;
  p.spec.device = b.device;
  auto done = [&](OffloadMode m, int64_t n, int64_t peak) {
    p.spec.mode = m;
    p.spec.blocks_per_group = n;
    p.predicted_peak = peak;
    // A GPU keeps the homes in host memory when they fit the host budget; else disk.
    if (b.device.is_cuda() && m != OffloadMode::none) {
      if (b.max_host_memory && total > *b.max_host_memory) {
        if (m == OffloadMode::group) p.spec.mode = OffloadMode::disk;
      } else {
        p.predicted_host = total;
      }
    }
    return p;
  };
  if (total + max_act <= b.max_memory) return done(OffloadMode::none, 1, total + max_act);
  int64_t model_peak = 0;
  for (const auto& c : cs) model_peak = std::max(model_peak, c.weight_bytes + c.activation_bytes);
  if (model_peak <= b.max_memory && !(b.device.is_cuda() && b.max_host_memory && total > *b.max_host_memory))
    return done(OffloadMode::model, 1, model_peak);
  auto staged_peak = [&](bool leaf, int64_t n) {
    int64_t idle_all = 0, worst = 0;
    for (const auto& c : cs) idle_all += idle_of(c, leaf, n);
    for (const auto& c : cs) {
      const int64_t active = leaf ? 2 * c.leaf_bytes
                                  : c.unmatched_bytes + 2 * std::min<int64_t>(n, std::max<int64_t>(c.num_blocks, 1)) * c.block_bytes;
      worst = std::max(worst, active + c.activation_bytes + idle_all - idle_of(c, leaf, n));
    }
    return worst;
  };
  int64_t max_blocks = 1;
  for (const auto& c : cs) max_blocks = std::max(max_blocks, c.num_blocks);
  for (int64_t n = max_blocks; n >= 1; --n)
    if (const int64_t peak = staged_peak(false, n); peak <= b.max_memory) return done(OffloadMode::group, n, peak);
  const int64_t leaf = staged_peak(true, 1);
  if (leaf <= b.max_memory) return done(OffloadMode::leaf, 1, leaf);
  fail(kCtx, "--max-memory ", io::format_bytes(uint64_t(b.max_memory)), " is too small: even leaf-level offloading ",
       "needs ", io::format_bytes(uint64_t(leaf)), " (weights ", io::format_bytes(uint64_t(total)), ")");
}

int64_t parse_size(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  check(i > 0, kCtx, "size '", s, "' does not start with a number (e.g. 512M, 8G)");
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(std::string(s.substr(0, i)), &used);
  } catch (...) {
    fail(kCtx, "size '", s, "' is not a number");
  }
  check(used == i, kCtx, "size '", s, "' is not a number");
  std::string unit(s.substr(i));
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "MB", "GiB" -> "M", "GI"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  check(shift >= 0, kCtx, "size '", s, "' has an unknown unit (expected K, M, G or T)");
  const double bytes = v * std::ldexp(1.0, shift);
  check(bytes >= 1 && bytes < 9.0e18, kCtx, "size '", s, "' is out of range");
  return int64_t(bytes);
}

}  // namespace diffq::offload
