#include "compile/graph.h"

#include <sstream>

#include "diffq/error.h"

namespace diffq::compile {

namespace {
void for_each_ref(Graph& g, const std::function<void(Ref&)>& f) {
  for (Node& n : g.nodes)
    for (Ref& r : n.inputs) f(r);
  for (Ref& r : g.outputs) f(r);
}

std::string instr_str(const Instr& in) {
  std::ostringstream s;
  switch (in.op) {
    case Instr::Op::load: s << "load" << in.a; break;
    case Instr::Op::binary: s << "bin" << in.fn << "(" << in.a << "," << in.b << ")"; break;
    case Instr::Op::scalar: s << "scal" << in.fn << "(" << in.a << "," << in.s0 << ")"; break;
    case Instr::Op::clamp: s << "clamp(" << in.a << ")"; break;
    case Instr::Op::unary: s << "un" << in.fn << "(" << in.a << ")"; break;
    case Instr::Op::cast: s << "cast(" << in.a << ")"; break;
  }
  if (in.dtype != DType::f32) s << ":" << dtype_name(in.dtype);
  return s.str();
}
}  // namespace

std::string FusedProgram::str() const {
  std::string s;
  if (norm)
    s = std::string(norm->rms ? "rms_norm" : "layer_norm") + "(x" + std::to_string(norm->x) + ",w" +
        std::to_string(norm->w) + ",b" + std::to_string(norm->b) + ",eps" + std::to_string(norm->eps) + ")->leaf" +
        std::to_string(norm->leaf) + ";";
  if (gemm && !gemm->module.empty())
    s += "qlinear(x" + std::to_string(gemm->x) + "," + gemm->module + ")->leaf" + std::to_string(gemm->leaf) + ";";
  else if (gemm)
    s += "linear(x" + std::to_string(gemm->x) + ",w" + std::to_string(gemm->w) + ",b" + std::to_string(gemm->b) +
         ")->leaf" + std::to_string(gemm->leaf) + ";";
  for (const Instr& i : code) s += (s.empty() || s.back() == ';' ? "" : " ") + instr_str(i);
  return s;
}

std::string NormRope::str() const {
  std::string s;
  for (const Segment& g : segments)
    s += (s.empty() ? "" : " ") + std::string("rms_norm(x") + std::to_string(g.x) + ",w" + std::to_string(g.w) + ")@" +
         std::to_string(g.s0);
  return s + " rope(c" + std::to_string(cos) + ",s" + std::to_string(sin) + ")";
}

std::string Node::label() const {
  switch (kind) {
    case Kind::op: return std::string(ops::op_name(op));
    case Kind::fused: return "fused[" + program->str() + "]";
    case Kind::opaque: return "opaque(" + module_path + ")";
    case Kind::norm_rope: return "norm_rope[" + norm_rope->str() + "]";
  }
  return "?";
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(nodes.size(), 0);
  for (const Node& n : nodes)
    for (const Ref& r : n.inputs)
      if (r.src == Ref::Src::value) ++uses[size_t(r.index)];
  for (const Ref& r : outputs)
    if (r.src == Ref::Src::value) ++uses[size_t(r.index)];
  return uses;
}

bool Graph::is_output(int32_t node) const {
  for (const Ref& r : outputs)
    if (r.src == Ref::Src::value && r.index == node) return true;
  return false;
}

int64_t Graph::count(Node::Kind k) const {
  int64_t c = 0;
  for (const Node& n : nodes) c += n.kind == k;
  return c;
}

std::string Graph::dump() const {
  std::ostringstream s;
  auto ref = [&](const Ref& r) {
    switch (r.src) {
      case Ref::Src::none: return std::string("-");
      case Ref::Src::input: return "in" + std::to_string(r.index);
      case Ref::Src::param: return "p" + std::to_string(r.index);
      case Ref::Src::value: return "%" + std::to_string(r.index);
      case Ref::Src::constant: return "c" + std::to_string(r.index);
    }
    return std::string("?");
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    s << "%" << i << " = " << n.label() << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) s << (j ? ", " : "") << ref(n.inputs[j]);
    s << ") " << shape_str(n.out.shape) << " " << dtype_name(n.out.dtype);
    if (n.host >= 0) s << " -> %" << n.host << "@" << n.host_offset;
    if (n.elided) s << " elided";
    s << "\n";
  }
  s << "return";
  for (const Ref& r : outputs) s << " " << ref(r);
  s << "\n";
  return s.str();
}

void compact(Graph& g, const std::vector<bool>& keep) {
  std::vector<int32_t> remap(g.nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) {
      remap[i] = int32_t(kept.size());
      kept.push_back(std::move(g.nodes[i]));
    }
  g.nodes = std::move(kept);
  for_each_ref(g, [&](Ref& r) {
    if (r.src != Ref::Src::value) return;
    check(remap[size_t(r.index)] >= 0, "compile", "internal: a removed node %", r.index, " is still read");
    r.index = remap[size_t(r.index)];
  });
  for (Node& n : g.nodes)
    if (n.host >= 0) {
      check(remap[size_t(n.host)] >= 0, "compile", "internal: the host %", n.host, " of a placed node was removed");
      n.host = remap[size_t(n.host)];
    }
}

void reorder(Graph& g, const std::vector<int32_t>& order) {
  check(order.size() == g.nodes.size(), "compile", "internal: reorder of ", g.nodes.size(), " nodes with ",
        order.size(), " positions");
  std::vector<int32_t> remap(g.nodes.size(), -1);
  std::vector<Node> out;
  out.reserve(order.size());
  for (int32_t i : order) {
    check(remap[size_t(i)] < 0, "compile", "internal: node %", i, " twice in a reorder");
    remap[size_t(i)] = int32_t(out.size());
    for (const Ref& r : g.nodes[size_t(i)].inputs)
      check(r.src != Ref::Src::value || remap[size_t(r.index)] >= 0, "compile", "internal: reorder puts %", i,
            " before its input %", r.index);
    out.push_back(std::move(g.nodes[size_t(i)]));
  }
  g.nodes = std::move(out);
  for_each_ref(g, [&](Ref& r) {
    if (r.src == Ref::Src::value) r.index = remap[size_t(r.index)];
  });
  for (Node& n : g.nodes)
    if (n.host >= 0) n.host = remap[size_t(n.host)];
}

void redirect(Graph& g, int32_t from, int32_t to) {
  for_each_ref(g, [&](Ref& r) {
    if (r.src == Ref::Src::value && r.index == from) r.index = to;
  });
}

Instr elementwise_instr(const Node& n, int32_t a, int32_t b) {
  Instr in;
  in.dtype = n.out.dtype;
  in.fn = n.attrs.i0;
  in.a = a;
  switch (n.op) {
    case ops::OpKind::binary:
      in.op = Instr::Op::binary;
      in.b = b;
      break;
    case ops::OpKind::scalar:
      in.op = Instr::Op::scalar;
      in.s0 = float(n.attrs.f0);
      break;
    case ops::OpKind::clamp:
      in.op = Instr::Op::clamp;
      in.s0 = float(n.attrs.f0);
      in.s1 = float(n.attrs.f1);
      break;
    case ops::OpKind::unary: in.op = Instr::Op::unary; break;
    default: in.op = Instr::Op::cast; break;
  }
  return in;
}

}  // namespace diffq::compile
