// Pattern fusion of a linear into the elementwise node that consumes its output (GEMM epilogue): FLUX's
// FeedForward linear -> GELU(tanh), the single blocks' proj_mlp -> GELU and to_out / proj_out ->
// residual + gate * x become one node. The executor runs the GEMM part by part (the parts sgemm splits
// C into) and the program on each part while it is in cache; the linear's output buffer disappears from
// the memory plan. The same GEMM calls and the same per-element program give the unfused graph's bits.
#include "compile/passes.h"

namespace diffq::compile {

namespace {
bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A fusable elementwise op node as a fused node running a one-instruction program.
Node as_fused(const Node& n) {
  FusedProgram prog;
  Node f;
  f.kind = Node::Kind::fused;
  f.out = n.out;
  std::vector<int32_t> reg;
  for (const Ref& r : n.inputs) {
    int32_t k = -1;
    for (size_t l = 0; l < f.inputs.size(); ++l)
      if (f.inputs[l].same_view(r)) k = int32_t(l);
    if (k < 0) {
      f.inputs.push_back(r);
      Instr ld;
      ld.op = Instr::Op::load;
      ld.a = int32_t(f.inputs.size() - 1);
      prog.code.push_back(ld);
      k = int32_t(f.inputs.size() - 1);
    }
    reg.push_back(k);  // load k is register k: loads come first, one per leaf
  }
  const Instr in = elementwise_instr(n, reg[0], n.op == ops::OpKind::binary ? reg[1] : -1);
  prog.code.push_back(in);
  f.program = std::make_shared<const FusedProgram>(std::move(prog));
  return f;
}
}  // namespace

int64_t fuse_gemm_epilogue(Graph& g, bool quantized) {
  const std::vector<int> uses = g.use_counts();
  const size_t n = g.nodes.size();
  std::vector<int32_t> reader(n, -1);
  for (size_t j = 0; j < n; ++j)
    for (const Ref& r : g.nodes[j].inputs)
      if (r.src == Ref::Src::value) reader[size_t(r.index)] = int32_t(j);
  std::vector<bool> keep(n, true);
  int64_t folded = 0;
  for (size_t i = 0; i < n; ++i) {
    const Node& lin = g.nodes[i];
    const bool dense = lin.kind == Node::Kind::op && lin.op == ops::OpKind::linear && lin.inputs.size() >= 2;
    const bool quant = quantized && lin.kind == Node::Kind::opaque && lin.quantized_linear && lin.inputs.size() == 1;
    if ((!dense && !quant) || !g.on_graph_device(lin) || !is_float(lin.out.dtype) || uses[i] != 1 ||
        g.is_output(int32_t(i)) || reader[i] < 0)
      continue;
    bool float_inputs = true;
    for (const Ref& in : lin.inputs) float_inputs &= !in.defined() || is_float(in.dtype);
    if (!float_inputs || (dense && lin.inputs[1].shape.size() != 2)) continue;
    Node& f = g.nodes[size_t(reader[i])];
    const bool fused = f.kind == Node::Kind::fused && !f.program->norm && !f.program->gemm;
    if ((!fused && !is_fusable_elementwise(g, f)) || f.out.shape != lin.out.shape || f.out.shape.empty()) continue;
    int32_t k = -1;
    for (size_t l = 0; l < f.inputs.size(); ++l)
      if (f.inputs[l].src == Ref::Src::value && f.inputs[l].index == int32_t(i)) k = int32_t(l);
    if (k < 0 || !f.inputs[size_t(k)].is_whole(lin.out.shape) || f.inputs[size_t(k)].dtype != lin.out.dtype) continue;
    if (!fused) {
      f = as_fused(f);
      for (size_t l = 0; l < f.inputs.size(); ++l)
        if (f.inputs[l].src == Ref::Src::value && f.inputs[l].index == int32_t(i)) k = int32_t(l);
    }
    FusedProgram prog = *f.program;
    GemmPrologue gp;
    gp.leaf = k;
    gp.dtype = lin.out.dtype;
    auto add_leaf = [&](const Ref& in) {
      f.inputs.push_back(in);
      return int32_t(f.inputs.size() - 1);
    };
    gp.x = add_leaf(lin.inputs[0]);
    if (quant) {
      gp.module = lin.module_path;
    } else {
      gp.w = add_leaf(lin.inputs[1]);
      gp.b = lin.inputs.size() > 2 && lin.inputs[2].defined() ? add_leaf(lin.inputs[2]) : -1;
    }
    prog.gemm = gp;
    f.inputs[size_t(k)] = Ref{};  // the part of the GEMM's output, not a buffer
    f.program = std::make_shared<const FusedProgram>(std::move(prog));
    keep[i] = false;
    ++folded;
  }
  if (folded) compact(g, keep);
  if (quantized) {
    // The quantized linears no elementwise node took: each becomes a fused node of its own whose program
    // only loads the GEMM's part, so that its output is planned (arena, concat slices) like any node's
    // instead of being a separate allocation made by an opaque call.
    for (Node& n : g.nodes) {
      if (n.kind != Node::Kind::opaque || !n.quantized_linear || n.inputs.size() != 1 || !g.on_graph_device(n) ||
          !is_float(n.out.dtype) || !is_float(n.inputs[0].dtype))
        continue;
      FusedProgram prog;
      Instr ld;
      ld.op = Instr::Op::load;
      ld.a = 0;
      prog.code.push_back(ld);
      GemmPrologue gp;
      gp.leaf = 0;
      gp.x = 1;
      gp.dtype = n.out.dtype;
      gp.module = n.module_path;
      prog.gemm = gp;
      Node f;
      f.kind = Node::Kind::fused;
      f.out = n.out;
      f.inputs = {Ref{}, n.inputs[0]};
      f.program = std::make_shared<const FusedProgram>(std::move(prog));
      n = std::move(f);
    }
  }
  return folded;
}

}  // namespace diffq::compile
