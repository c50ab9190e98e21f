// Common-subexpression elimination: an op node with the same kind, attributes and input views as an
// earlier one computes the same buffer (ops are deterministic), so its readers read the earlier one.
// Opaque nodes (real module calls) are never merged.
#include <map>
#include <sstream>

#include "compile/passes.h"

namespace diffq::compile {

namespace {
std::string key_of(const Node& n) {
  std::ostringstream s;
  s.precision(17);
  s << int(n.kind) << '|' << int(n.op) << '|' << n.attrs.i0 << '|' << n.attrs.i1 << '|' << n.attrs.f0 << '|'
    << n.attrs.f1 << '|' << n.attrs.flag << '|' << int(n.attrs.dtype) << '|' << int(n.attrs.device.kind) << ':'
    << n.attrs.device.index << '|';
  for (int64_t v : n.attrs.ints) s << v << ',';
  if (n.program) s << '|' << n.program->str();
  for (const Ref& r : n.inputs) {
    s << '#' << int(r.src) << ':' << r.index << ':' << r.offset << ':' << int(r.dtype) << ':';
    for (int64_t v : r.shape) s << v << ',';
    s << ':';
    for (int64_t v : r.strides) s << v << ',';
  }
  return s.str();
}
}  // namespace

int64_t eliminate_common_subexpressions(Graph& g) {
  std::map<std::string, int32_t> seen;
  std::vector<bool> keep(g.nodes.size(), true);
  int64_t merged = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == Node::Kind::opaque) continue;
    const auto [it, fresh] = seen.emplace(key_of(n), int32_t(i));
    if (fresh) continue;
    redirect(g, int32_t(i), it->second);  // later nodes' keys see the survivor, so chains merge too
    keep[i] = false;
    ++merged;
  }
  if (merged) compact(g, keep);
  return merged;
}

}  // namespace diffq::compile
