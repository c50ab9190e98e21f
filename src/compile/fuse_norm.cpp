// Pattern fusion of a normalisation into the elementwise node that consumes it: FLUX's
// LayerNorm(x) * (1 + scale) + shift (and T5/CLIP norms followed by elementwise ops) become one pass
// over each row: the norm's statistics, the normalised row, then the fused program on it. The norm's
// output buffer is never written.
#include "compile/passes.h"

namespace diffq::compile {

int64_t fuse_norm_prologue(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> keep(g.nodes.size(), true);
  int64_t folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& f = g.nodes[i];
    if (f.kind != Node::Kind::fused || f.program->norm || f.out.shape.empty()) continue;
    for (size_t k = 0; k < f.inputs.size(); ++k) {
      const Ref r = f.inputs[k];
      if (r.src != Ref::Src::value || !keep[size_t(r.index)]) continue;
      const Node& p = g.nodes[size_t(r.index)];
      const bool norm = p.kind == Node::Kind::op && (p.op == ops::OpKind::layer_norm || p.op == ops::OpKind::rms_norm);
      if (!norm || uses[size_t(r.index)] != 1 || g.is_output(r.index) || p.out.shape != f.out.shape ||
          !r.is_whole(p.out.shape) || !g.on_graph_device(p))
        continue;
      bool float_inputs = true;
      for (const Ref& in : p.inputs)
        float_inputs &= !in.defined() || in.dtype == DType::f32 || in.dtype == DType::bf16 || in.dtype == DType::f16;
      if (!float_inputs) continue;
      FusedProgram prog = *f.program;
      NormPrologue np;
      np.rms = p.op == ops::OpKind::rms_norm;
      np.eps = p.attrs.f0;
      np.leaf = int32_t(k);
      np.dtype = p.out.dtype;
      auto add_leaf = [&](const Ref& in) {
        if (!in.defined()) return int32_t(-1);
        f.inputs.push_back(in);
        return int32_t(f.inputs.size() - 1);
      };
      np.x = add_leaf(p.inputs[0]);
      np.w = p.inputs.size() > 1 ? add_leaf(p.inputs[1]) : -1;
      np.b = !np.rms && p.inputs.size() > 2 ? add_leaf(p.inputs[2]) : -1;
      prog.norm = np;
      f.inputs[k] = p.inputs[0];  // placeholder of the same shape; its load reads the normalised row
      f.program = std::make_shared<const FusedProgram>(std::move(prog));
      keep[size_t(r.index)] = false;
      ++folded;
      break;
    }
  }
  if (folded) compact(g, keep);
  return folded;
}

}  // namespace diffq::compile
