// Concat elision: a concat's inputs are computed straight into their slices of the concat's buffer
// (FLUX's single blocks: proj_out(cat([attn, gelu(proj_mlp(x))], -1)); the joint blocks' v =
// cat([v_txt, v_img], 1); cat([txt, img], 1) before the single blocks). A producer qualifies when the
// concat is its only reader, it is not a graph output, and it can write its output through the view of
// the slice: its shape laid over the slice (a reshape between them is fine: strides are derived for the
// producer's own shape), and
//   - the slice is contiguous (a concat along the first non-1 dim): any op or fused node;
//   - otherwise (last stride 1): fused elementwise / norm-prologue nodes, norm_rope, copy / cast; GEMM
//     writers (fused nodes with a GEMM prologue, linear) when the rows of the slice have one stride
//     (the GEMM's ld).
// The concat then runs no kernel (elided); inputs whose producers do not qualify are copied into their
// slices as before. A concat that only reassembles one buffer from its slices, in order, is removed
// (its readers read that buffer). The qualifying producers are moved to just before the concat (they have no other
// reader), so the concat's buffer, alive from the first of them on, is not held while unrelated work
// runs in between (FLUX: proj_mlp runs after the attention instead of before it).
#include <algorithm>

#include "compile/passes.h"

namespace diffq::compile {

namespace {

// Strides for `shape` such that its elements, in row-major order, land where the row-major elements of
// a view of `view_shape` with `view_strides` are (a reshape of the view), or false when no strides can.
bool reshape_strides(const Shape& view_shape, const Shape& view_strides, const Shape& shape, Shape& out) {
  out.assign(shape.size(), 0);
  int64_t r = int64_t(view_shape.size()), p = int64_t(shape.size());
  while (r > 0) {
    // The next run of view dims (from the back) laid out as one contiguous block of `base` steps.
    const int64_t base = view_strides[size_t(r - 1)];
    int64_t size = view_shape[size_t(r - 1)];
    --r;
    while (r > 0 && (view_shape[size_t(r - 1)] == 1 || view_strides[size_t(r - 1)] == base * size)) {
      size *= view_shape[size_t(r - 1)];
      --r;
    }
    int64_t acc = 1;
    while (p > 0 && acc < size) {
      out[size_t(p - 1)] = base * acc;
      acc *= shape[size_t(p - 1)];
      --p;
    }
    if (acc != size) return false;
  }
  for (; p > 0; --p) {
    if (shape[size_t(p - 1)] != 1) return false;
    out[size_t(p - 1)] = 1;
  }
  return true;
}

bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// Whether (shape, strides) lays the elements out row-major without gaps (size-1 dims' strides ignored).
bool dense_row_major(const Shape& shape, const Shape& strides) {
  const Shape c = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != c[d]) return false;
  return true;
}

// Whether node n can write its output through (n.out.shape, strides).
bool can_write_strided(const Graph& g, const Node& n, const Shape& strides) {
  if (n.kind == Node::Kind::opaque || !g.on_graph_device(n)) return false;
  if (n.kind == Node::Kind::op && n.op == ops::OpKind::to_device) return false;  // the backend allocates
  if (strides == contiguous_strides(n.out.shape)) return true;
  if (n.out.shape.empty() || strides.back() != 1) return false;
  const bool gemm = (n.kind == Node::Kind::fused && n.program->gemm) ||
                    (n.kind == Node::Kind::op && n.op == ops::OpKind::linear && is_float(n.out.dtype));
  if (gemm) return uniform_row_stride(n.out.shape, strides) >= 0;
  if (n.kind == Node::Kind::fused || n.kind == Node::Kind::norm_rope) return true;
  return n.kind == Node::Kind::op && (n.op == ops::OpKind::copy || n.op == ops::OpKind::cast);
}

// Whether concat node c only reassembles one buffer: its inputs, in order, are the slices of one node's
// output (of c's shape and dtype) at the positions c puts them (FLUX's cat([y[:, :T], y[:, T:]], 1)).
int32_t identity_source(const Graph& g, const Node& c, int64_t dim) {
  const Shape hs = contiguous_strides(c.out.shape);
  int32_t src = -1;
  int64_t at = 0;
  for (const Ref& r : c.inputs) {
    if (r.src != Ref::Src::value || (src >= 0 && r.index != src)) return -1;
    src = r.index;
    const Node& p = g.nodes[size_t(r.index)];
    if (p.out.shape != c.out.shape || p.out.dtype != c.out.dtype || r.dtype != c.out.dtype || r.strides != hs ||
        r.shape.size() != hs.size() || r.offset != at * hs[size_t(dim)])
      return -1;
    for (size_t d = 0; d < hs.size(); ++d)
      if (int64_t(d) != dim && r.shape[d] != c.out.shape[d]) return -1;
    at += r.shape[size_t(dim)];
  }
  return at == c.out.shape[size_t(dim)] ? src : -1;
}

}  // namespace

int64_t uniform_row_stride(const Shape& shape, const Shape& strides) {
  if (shape.empty() || strides.back() != 1) return -1;
  int64_t ld = shape.back(), prev = -1;  // prev: the stride the next outer non-1 dim must have
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d) {
    if (shape[size_t(d)] == 1) continue;
    if (prev < 0) ld = strides[size_t(d)];
    else if (strides[size_t(d)] != prev) return -1;
    prev = strides[size_t(d)] * shape[size_t(d)];
  }
  return ld;
}

int64_t elide_concats(Graph& g) {
  // 1. A concat that reassembles one buffer is that buffer.
  int64_t identities = 0;
  {
    std::vector<bool> keep(g.nodes.size(), true);
    for (size_t c = 0; c < g.nodes.size(); ++c) {
      const Node& cat = g.nodes[c];
      if (cat.kind != Node::Kind::op || cat.op != ops::OpKind::concat || cat.out.shape.empty() || g.is_output(int32_t(c)))
        continue;
      const int64_t rank = int64_t(cat.out.shape.size());
      const int64_t dim = cat.attrs.i0 < 0 ? cat.attrs.i0 + rank : cat.attrs.i0;
      if (dim < 0 || dim >= rank) continue;
      const int32_t src = identity_source(g, cat, dim);
      if (src < 0 || g.nodes[size_t(src)].out.device != cat.out.device) continue;
      redirect(g, int32_t(c), src);
      keep[c] = false;
      ++identities;
    }
    if (identities) {
      for (size_t c = 0; c < g.nodes.size(); ++c)  // the removed concats read nothing any more
        if (!keep[c]) g.nodes[c].inputs.clear();
      compact(g, keep);
    }
  }
  // 2. Concats of graph inputs: a view of the inputs' own buffer when they lie there in order (run time).
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    Node& cat = g.nodes[c];
    if (cat.kind != Node::Kind::op || cat.op != ops::OpKind::concat || !g.on_graph_device(cat) ||
        cat.out.shape.empty() || g.is_output(int32_t(c)) || cat.inputs.empty())
      continue;
    bool inputs = true;
    for (const Ref& r : cat.inputs) inputs &= r.src == Ref::Src::input && r.dtype == cat.out.dtype;
    cat.alias_inputs = inputs;
  }
  // 3. Producers written into their slices.
  const std::vector<int> uses = g.use_counts();
  const size_t n = g.nodes.size();
  std::vector<bool> sink(n, false);  // placed producers, moved to just before their concat
  int64_t placed_total = 0;
  for (size_t c = 0; c < n; ++c) {
    Node& cat = g.nodes[c];
    if (cat.kind != Node::Kind::op || cat.op != ops::OpKind::concat || !g.on_graph_device(cat) ||
        cat.out.shape.empty() || cat.elided)
      continue;
    const int64_t rank = int64_t(cat.out.shape.size());
    const int64_t dim = cat.attrs.i0 < 0 ? cat.attrs.i0 + rank : cat.attrs.i0;
    if (dim < 0 || dim >= rank) continue;
    const Shape hs = contiguous_strides(cat.out.shape);
    std::vector<bool> placed(cat.inputs.size(), false);
    int64_t at = 0, count = 0;
    for (size_t k = 0; k < cat.inputs.size(); ++k) {
      const Ref& r = cat.inputs[k];
      const int64_t width = r.shape.size() == size_t(rank) ? r.shape[size_t(dim)] : 0;
      const int64_t slot = at * hs[size_t(dim)];
      at += width;
      if (r.src != Ref::Src::value || r.shape.size() != size_t(rank) || r.dtype != cat.out.dtype) continue;
      Node& p = g.nodes[size_t(r.index)];
      // The concat reads the producer once, as a reshape of its whole (contiguous) buffer.
      if (uses[size_t(r.index)] != 1 || g.is_output(r.index) || p.host >= 0 || p.elided || r.offset != 0 ||
          p.out.dtype != r.dtype || p.out.device != cat.out.device || shape_numel(p.out.shape) != shape_numel(r.shape) ||
          shape_numel(r.shape) == 0 || r.strides != contiguous_strides(r.shape))
        continue;
      Shape ps;
      if (!reshape_strides(r.shape, hs, p.out.shape, ps)) continue;
      if (dense_row_major(p.out.shape, ps)) ps = contiguous_strides(p.out.shape);  // a contiguous slice
      if (!can_write_strided(g, p, ps)) continue;
      p.host = int32_t(c);
      p.host_strides = ps;
      p.host_offset = slot;
      placed[k] = true;
      sink[size_t(r.index)] = true;
      ++count;
    }
    if (count == 0) continue;
    cat.elided = true;
    cat.placed = std::move(placed);
    placed_total += count;
  }
  if (placed_total == 0) return identities;
  // Each placed producer right before its concat, in their original order.
  std::vector<std::vector<int32_t>> before(n);
  for (size_t i = 0; i < n; ++i)
    if (sink[i]) before[size_t(g.nodes[i].host)].push_back(int32_t(i));
  std::vector<int32_t> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (sink[i]) continue;
    for (int32_t p : before[i]) order.push_back(p);
    order.push_back(int32_t(i));
  }
  reorder(g, order);
  return identities + placed_total;
}

}  // namespace diffq::compile
