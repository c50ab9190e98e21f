#include "compile/plan_memory.h"

#include <algorithm>

#include "compile/passes.h"

namespace diffq::compile {

namespace {
constexpr int64_t kAlign = 64;
int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Whether node `i` may write its output over the bytes of input buffer `v` (it reads v whole and at the
// same positions it writes; the kernels load a chunk before storing it).
bool can_overwrite(const Graph& g, size_t i, int32_t v) {
  const Node& n = g.nodes[i];
  const Node& in = g.nodes[size_t(v)];
  if (in.out.shape != n.out.shape || in.out.dtype != n.out.dtype || in.out.device != n.out.device) return false;
  const bool elementwise = n.kind == Node::Kind::fused || (n.kind == Node::Kind::op && n.op == ops::OpKind::binary);
  if (!elementwise) return false;
  for (const Ref& r : n.inputs)
    if (r.src == Ref::Src::value && r.index == v && !r.is_whole(in.out.shape)) return false;
  return true;
}
}  // namespace

int64_t MemoryPlan::num_inplace() const {
  int64_t c = 0;
  for (int32_t v : inplace_of) c += v >= 0;
  return c;
}

MemoryPlan plan_memory(const Graph& g, bool enabled, bool inplace) {
  MemoryPlan p;
  const size_t n = g.nodes.size();
  p.enabled = enabled;
  p.offset.assign(n, -1);
  p.inplace_of.assign(n, -1);
  p.last_use.assign(n, -1);
  for (size_t i = 0; i < n; ++i)
    for (const Ref& r : g.nodes[i].inputs)
      if (r.src == Ref::Src::value) p.last_use[size_t(r.index)] = int32_t(i);
  for (const Ref& r : g.outputs)
    if (r.src == Ref::Src::value) p.last_use[size_t(r.index)] = int32_t(n);
  for (size_t i = 0; i < n; ++i)
    if (p.last_use[i] < 0) p.last_use[i] = int32_t(i);  // never read: dies at once
  if (!enabled) return p;
  for (const Node& nd : g.nodes)
    if (nd.kind != Node::Kind::opaque) {
      p.device = nd.out.device;
      break;
    }

  struct Block {
    int64_t off, size;
    int32_t node;
  };
  std::vector<Block> live;  // sorted by offset
  for (size_t i = 0; i < n; ++i) {
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Block& b) { return p.last_use[size_t(b.node)] < int32_t(i); }),
               live.end());
    const Node& nd = g.nodes[i];
    if (nd.kind == Node::Kind::opaque || g.is_output(int32_t(i)) || nd.out.device != p.device || nd.out.nbytes() == 0)
      continue;
    p.unplanned_bytes += aligned(int64_t(nd.out.nbytes()));
    if (inplace) {
      bool done = false;
      for (Block& b : live)
        if (p.last_use[size_t(b.node)] == int32_t(i) && can_overwrite(g, i, b.node)) {
          p.inplace_of[i] = b.node;
          p.offset[i] = b.off;
          b.node = int32_t(i);
          done = true;
          break;
        }
      if (done) continue;
    }
    const int64_t size = aligned(int64_t(nd.out.nbytes()));
    int64_t prev_end = 0, off = -1;
    size_t pos = live.size();
    for (size_t k = 0; k < live.size(); ++k) {
      if (live[k].off - prev_end >= size) {
        off = prev_end;
        pos = k;
        break;
      }
      prev_end = std::max(prev_end, live[k].off + live[k].size);
    }
    if (off < 0) off = prev_end;
    live.insert(live.begin() + int64_t(pos), Block{off, size, int32_t(i)});
    p.offset[i] = off;
    p.arena_bytes = std::max(p.arena_bytes, off + size);
  }
  return p;
}

}  // namespace diffq::compile
