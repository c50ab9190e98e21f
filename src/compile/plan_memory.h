// Static memory planning: every intermediate buffer of a graph gets a byte offset in one arena,
// allocated once per run. Offsets come from the buffers' liveness (first write .. last read): largest
// first, each at the lowest offset free during its whole lifetime, so buffers that never coexist share
// bytes and the arena stays close to the largest set of simultaneously live buffers. An
// elementwise node may write over an input buffer that dies at that node (in place). Graph outputs
// and opaque results get their own allocations (they outlive the run / come from a real module).
#pragma once

#include <cstdint>
#include <vector>

#include "compile/graph.h"

namespace diffq::compile {

struct MemoryPlan {
  bool enabled = false;
  Device device{};
  int64_t arena_bytes = 0;
  int64_t unplanned_bytes = 0;     // sum of the planned buffers' sizes (what no reuse would need)
  std::vector<int64_t> offset;     // per node: byte offset in the arena, -1 = its own allocation
  std::vector<int32_t> last_use;   // per node: last node reading it (nodes.size() for graph outputs)
  std::vector<int32_t> inplace_of; // per node: the node whose bytes it overwrites, -1 if none
  int64_t num_inplace() const;
};

MemoryPlan plan_memory(const Graph& g, bool enabled, bool inplace);

}  // namespace diffq::compile
