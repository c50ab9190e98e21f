// Dead-code elimination: keep only the nodes some graph output depends on.
#include "compile/passes.h"

namespace diffq::compile {

int64_t eliminate_dead_code(Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const Ref& r : g.outputs)
    if (r.src == Ref::Src::value) live[size_t(r.index)] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (const Ref& r : g.nodes[i].inputs)
      if (r.src == Ref::Src::value) live[size_t(r.index)] = true;
  }
  int64_t removed = 0;
  for (bool l : live) removed += !l;
  if (removed) compact(g, live);
  return removed;
}

}  // namespace diffq::compile
