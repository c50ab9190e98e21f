// Static memory planning: every intermediate buffer of a graph gets a byte offset in one arena,
// allocated once per run. Offsets come from the buffers' liveness (first write .. last read): largest
// first, each at the lowest offset free during its whole lifetime, so buffers that never coexist share
// bytes and the arena stays close to the largest set of simultaneously live buffers. An
// elementwise node may write over an input buffer that dies at that node (in place). Graph outputs
// and opaque results get their own allocations (they outlive the run / come from a real module). A
// node placed into an elided concat (Node::host) has no buffer: its host's buffer is alive from the
// first such producer on.
#pragma once

#include <cstdint>
#include <vector>

#include "compile/graph.h"

namespace diffq::compile {

// One arena buffer: [offset, offset + size) bytes, alive from node `first` to node `last`; `node` is the
// node owning it (the first of an in-place chain).
struct PlannedBuffer {
  int64_t offset = 0, size = 0;
  int32_t first = 0, last = 0, node = -1;
};

struct MemoryPlan {
  bool enabled = false;
  Device device{};
  int64_t arena_bytes = 0;
  int64_t unplanned_bytes = 0;     // sum of the planned buffers' sizes (what no reuse would need)
  std::vector<int64_t> offset;     // per node: byte offset in the arena, -1 = its own allocation
  std::vector<int32_t> last_use;   // per node: last node reading it (nodes.size() for graph outputs)
  std::vector<int32_t> inplace_of; // per node: the node whose bytes it overwrites, -1 if none
  std::vector<PlannedBuffer> buffers;
  int64_t num_inplace() const;
};

// The node position where the most arena bytes are alive, those bytes and the buffers alive there
// (what bounds the arena from below: a debugging aid, printed by the tests).
struct LivePeak {
  int32_t at = -1;
  int64_t bytes = 0;
  std::vector<PlannedBuffer> live;
};
LivePeak live_peak(const MemoryPlan& p);

MemoryPlan plan_memory(const Graph& g, bool enabled, bool inplace);

}  // namespace diffq::compile
