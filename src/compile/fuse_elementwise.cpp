// Elementwise fusion. A float elementwise op whose output is read exactly once, by another elementwise
// op of the same output shape that reads it whole, is inlined into its reader; each maximal tree of
// such ops becomes one fused node whose program is run by one loop nest over the output (by the graph
// device's compile backend: on the CPU backend/cpu/compile/fused_kernel.cpp). Values read more than once,
// graph outputs and broadcast intermediates stay materialised, so no work is ever repeated.
#include "compile/passes.h"

#include <map>

namespace diffq::compile {

namespace {
bool is_float16_or_32(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

struct Emitter {
  const Graph& g;
  const std::vector<bool>& inlined;
  FusedProgram prog;
  std::vector<Ref> leaves;

  int32_t leaf(const Ref& r) {
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].same_view(r))
        for (size_t k = 0; k < prog.code.size(); ++k)
          if (prog.code[k].op == Instr::Op::load && prog.code[k].a == int32_t(i)) return int32_t(k);
    leaves.push_back(r);
    Instr in;
    in.op = Instr::Op::load;
    in.a = int32_t(leaves.size() - 1);
    prog.code.push_back(in);
    return int32_t(prog.code.size() - 1);
  }

  int32_t operand(const Ref& r) {
    if (r.src == Ref::Src::value && inlined[size_t(r.index)]) return emit(g.nodes[size_t(r.index)]);
    return leaf(r);
  }

  int32_t emit(const Node& n) {
    const int32_t a = operand(n.inputs[0]);
    const int32_t b = n.op == ops::OpKind::binary ? operand(n.inputs[1]) : -1;
    const Instr in = elementwise_instr(n, a, b);
    prog.code.push_back(in);
    return int32_t(prog.code.size() - 1);
  }
};
}  // namespace

bool is_fusable_elementwise(const Graph& g, const Node& n) {
  if (n.kind != Node::Kind::op || !g.on_graph_device(n) || !is_float16_or_32(n.out.dtype)) return false;
  switch (n.op) {
    case ops::OpKind::binary:
    case ops::OpKind::scalar:
    case ops::OpKind::clamp:
    case ops::OpKind::unary:
    case ops::OpKind::cast: break;
    default: return false;
  }
  for (const Ref& r : n.inputs)
    if (!r.defined() || !is_float16_or_32(r.dtype)) return false;
  return true;
}

int64_t fuse_elementwise(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const size_t n = g.nodes.size();
  std::vector<bool> fusable(n), inlined(n, false);
  for (size_t i = 0; i < n; ++i) fusable[i] = is_fusable_elementwise(g, g.nodes[i]);
  std::vector<bool> has_inlined(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (!fusable[i]) continue;
    const Node& c = g.nodes[i];
    for (const Ref& r : c.inputs) {
      if (r.src != Ref::Src::value) continue;
      const size_t p = size_t(r.index);
      const Node& pn = g.nodes[p];
      if (!fusable[p] || uses[p] != 1 || g.is_output(int32_t(p)) || pn.out.shape != c.out.shape ||
          !r.is_whole(pn.out.shape))
        continue;
      inlined[p] = true;
      has_inlined[i] = true;
    }
  }
  int64_t folded = 0;
  std::vector<bool> keep(n, true);
  for (size_t i = 0; i < n; ++i) {
    if (inlined[i]) {
      keep[i] = false;
      ++folded;
      continue;
    }
    if (!has_inlined[i]) continue;
    Emitter e{g, inlined, {}, {}};
    e.emit(g.nodes[i]);
    Node f;
    f.kind = Node::Kind::fused;
    f.inputs = std::move(e.leaves);
    f.out = g.nodes[i].out;
    f.program = std::make_shared<const FusedProgram>(std::move(e.prog));
    g.nodes[i] = std::move(f);
  }
  if (folded) compact(g, keep);
  return folded;
}

}  // namespace diffq::compile
