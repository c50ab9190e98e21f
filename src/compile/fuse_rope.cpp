// Pattern fusion of FLUX's q / k normalisation with the rotary embedding: RMSNorm over the head dim then
// RoPE, with (joint blocks) or without (single blocks) the concat of the text and image halves along the
// sequence in between, becomes one norm_rope node: per row (b, s, h), the norm of the segment holding s,
// rounded to the norm's dtype, then RoPE with row s of the tables. The norms' and the concat's buffers
// disappear; each row is read once and written once.
#include "compile/passes.h"

namespace diffq::compile {

namespace {
bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// Node `v` read by `r` is an rms_norm read only there, whole, float, on the graph's device.
bool single_use_norm(const Graph& g, const std::vector<int>& uses, const Ref& r) {
  if (r.src != Ref::Src::value || uses[size_t(r.index)] != 1 || g.is_output(r.index)) return false;
  const Node& n = g.nodes[size_t(r.index)];
  if (n.kind != Node::Kind::op || n.op != ops::OpKind::rms_norm || !g.on_graph_device(n) ||
      !r.is_whole(n.out.shape) || n.out.shape.size() != 4 || !is_float(n.out.dtype))
    return false;
  for (const Ref& in : n.inputs)
    if (in.defined() && !is_float(in.dtype)) return false;
  return n.inputs.size() < 2 || !n.inputs[1].defined() || n.inputs[1].shape == Shape{n.out.shape.back()};
}
}  // namespace

int64_t fuse_norm_rope(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> keep(g.nodes.size(), true);
  int64_t matched = 0;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    Node& rope = g.nodes[j];
    if (rope.kind != Node::Kind::op || rope.op != ops::OpKind::rope || !g.on_graph_device(rope) ||
        rope.inputs.size() != 3 || !is_float(rope.out.dtype) || !is_float(rope.inputs[1].dtype) ||
        !is_float(rope.inputs[2].dtype))
      continue;
    const Ref& x = rope.inputs[0];
    std::vector<int32_t> norms, removed;
    if (single_use_norm(g, uses, x)) {
      norms.push_back(x.index);
    } else if (x.src == Ref::Src::value && uses[size_t(x.index)] == 1 && !g.is_output(x.index)) {
      const Node& cat = g.nodes[size_t(x.index)];
      if (cat.kind != Node::Kind::op || cat.op != ops::OpKind::concat || !x.is_whole(cat.out.shape) ||
          cat.out.shape.size() != 4 || (cat.attrs.i0 != 1 && cat.attrs.i0 != -3))
        continue;
      bool all = true;
      for (const Ref& in : cat.inputs) {
        all &= single_use_norm(g, uses, in) && g.nodes[size_t(in.index)].out.dtype == cat.out.dtype;
        if (all) norms.push_back(in.index);
      }
      if (!all) continue;
      removed.push_back(x.index);
    } else {
      continue;
    }
    NormRope spec;
    std::vector<Ref> leaves = {rope.inputs[1], rope.inputs[2]};
    spec.cos = 0;
    spec.sin = 1;
    int64_t s0 = 0;
    for (int32_t v : norms) {
      const Node& nn = g.nodes[size_t(v)];
      NormRope::Segment seg;
      seg.s0 = s0;
      seg.len = nn.out.shape[1];
      seg.eps = nn.attrs.f0;
      leaves.push_back(nn.inputs[0]);
      seg.x = int32_t(leaves.size() - 1);
      if (nn.inputs.size() > 1 && nn.inputs[1].defined()) {
        leaves.push_back(nn.inputs[1]);
        seg.w = int32_t(leaves.size() - 1);
      }
      spec.norm_dtype = nn.out.dtype;
      spec.segments.push_back(seg);
      s0 += seg.len;
      removed.push_back(v);
    }
    Node f;
    f.kind = Node::Kind::norm_rope;
    f.inputs = std::move(leaves);
    f.out = rope.out;
    f.norm_rope = std::make_shared<const NormRope>(std::move(spec));
    rope = std::move(f);
    for (int32_t v : removed) keep[size_t(v)] = false;
    ++matched;
  }
  if (matched) compact(g, keep);
  return matched;
}

}  // namespace diffq::compile
