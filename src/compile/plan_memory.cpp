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
  // A GEMM-prologue node writes its output before it has read all of its inputs: never in place.
  const bool elementwise = (n.kind == Node::Kind::fused && !n.program->gemm) ||
                           (n.kind == Node::Kind::op && n.op == ops::OpKind::binary);
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
  p.device = g.device;  // the buffers of nodes elsewhere (after a to_device) are allocations of their own

  // 1. Buffers: each planned node output, except that a node written in place joins the buffer of the
  //    input it overwrites (a chain shares one buffer).
  struct Buffer {
    int64_t size = 0, off = -1;
    int32_t first = 0, last = 0;
    std::vector<int32_t> nodes;
  };
  std::vector<Buffer> bufs;
  std::vector<int32_t> buf_of(n, -1);
  auto planned = [&](size_t i) {
    const Node& nd = g.nodes[i];
    return nd.kind != Node::Kind::opaque && nd.host < 0 && !nd.alias_inputs && !g.is_output(int32_t(i)) &&
           nd.out.device == p.device && nd.out.nbytes() > 0;
  };
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.nodes[i];
    if (nd.host >= 0) {
      // Written into its host's (an elided concat's) buffer: that buffer is alive from here on.
      const size_t h = size_t(nd.host);
      if (planned(h) && buf_of[h] < 0) {
        buf_of[h] = int32_t(bufs.size());
        bufs.push_back({aligned(int64_t(g.nodes[h].out.nbytes())), -1, int32_t(i), int32_t(i), {}});
        p.unplanned_bytes += bufs.back().size;
      }
      continue;
    }
    if (!planned(i)) continue;
    if (buf_of[i] >= 0) {  // a host whose producers came first
      Buffer& bf = bufs[size_t(buf_of[i])];
      bf.nodes.push_back(int32_t(i));
      bf.last = std::max(bf.last, p.last_use[i]);
      continue;
    }
    p.unplanned_bytes += aligned(int64_t(nd.out.nbytes()));
    int32_t into = -1;
    if (inplace)
      for (const Ref& r : nd.inputs)
        if (!nd.elided && r.src == Ref::Src::value && buf_of[size_t(r.index)] >= 0 && p.last_use[size_t(r.index)] == int32_t(i) &&
            bufs[size_t(buf_of[size_t(r.index)])].nodes.back() == r.index && can_overwrite(g, i, r.index)) {
          into = buf_of[size_t(r.index)];
          p.inplace_of[i] = r.index;
          break;
        }
    if (into < 0) {
      into = int32_t(bufs.size());
      bufs.push_back({aligned(int64_t(nd.out.nbytes())), -1, int32_t(i), int32_t(i), {}});
    }
    Buffer& bf = bufs[size_t(into)];
    bf.nodes.push_back(int32_t(i));
    bf.last = std::max(bf.last, p.last_use[i]);
    buf_of[i] = into;
  }
  // 2. Offsets: largest buffers first, each at the lowest offset where it overlaps no placed buffer
  //    whose lifetime intersects its own (greedy by size: close to the largest live set).
  std::vector<int32_t> order(bufs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = int32_t(k);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bufs[size_t(a)].size > bufs[size_t(b)].size; });
  std::vector<int32_t> placed;
  for (int32_t k : order) {
    Buffer& bf = bufs[size_t(k)];
    std::vector<std::pair<int64_t, int64_t>> busy;  // [off, end) of live-overlapping placed buffers
    for (int32_t o : placed) {
      const Buffer& ob = bufs[size_t(o)];
      if (ob.first <= bf.last && bf.first <= ob.last) busy.emplace_back(ob.off, ob.off + ob.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [b0, b1] : busy) {
      if (b0 - off >= bf.size) break;
      off = std::max(off, b1);
    }
    bf.off = off;
    placed.push_back(k);
    p.arena_bytes = std::max(p.arena_bytes, off + bf.size);
  }
  for (size_t i = 0; i < n; ++i)
    if (buf_of[i] >= 0) p.offset[i] = bufs[size_t(buf_of[i])].off;
  for (const Buffer& bf : bufs)
    p.buffers.push_back({bf.off, bf.size, bf.first, bf.last, bf.nodes.empty() ? -1 : bf.nodes.front()});
  return p;
}

LivePeak live_peak(const MemoryPlan& p) {
  LivePeak peak;
  int32_t end = 0;
  for (const PlannedBuffer& b : p.buffers) end = std::max(end, b.last);
  for (int32_t t = 0; t <= end; ++t) {
    int64_t bytes = 0;
    for (const PlannedBuffer& b : p.buffers) bytes += b.first <= t && t <= b.last ? b.size : 0;
    if (bytes > peak.bytes) peak.bytes = bytes, peak.at = t;
  }
  for (const PlannedBuffer& b : p.buffers)
    if (b.first <= peak.at && peak.at <= b.last) peak.live.push_back(b);
  return peak;
}

}  // namespace diffq::compile
