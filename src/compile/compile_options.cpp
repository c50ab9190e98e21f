#include "compile/compile_options.h"

#include <cstdlib>

#include "diffq/error.h"

namespace diffq::compile {

std::string CompileOptions::passes_str() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += name;
  };
  add(dce, "dce");
  add(cse, "cse");
  add(fuse, "fuse");
  add(fuse_norm, "fuse_norm");
  add(fuse_epilogue, "fuse_epilogue");
  add(fuse_dequant, "fuse_dequant");
  add(fuse_rope, "fuse_rope");
  add(elide_concat, "elide_concat");
  add(plan, "plan");
  add(inplace, "inplace");
  return s.empty() ? "none" : s;
}

CompileMode parse_compile_mode(std::string_view name) {
  if (name == "default") return CompileMode::default_mode;
  if (name == "reduce-overhead") return CompileMode::reduce_overhead;
  if (name == "max-autotune") return CompileMode::max_autotune;
  fail("compile", "unknown mode '", name, "' (expected default, reduce-overhead or max-autotune)");
}

std::string_view compile_mode_name(CompileMode m) {
  switch (m) {
    case CompileMode::default_mode: return "default";
    case CompileMode::reduce_overhead: return "reduce-overhead";
    case CompileMode::max_autotune: return "max-autotune";
  }
  return "default";
}

CompileOptions disable_passes(CompileOptions o, std::string_view list, std::string_view source) {
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    const std::string_view item = list.substr(pos, comma == std::string_view::npos ? list.npos : comma - pos);
    if (item == "dce") o.dce = false;
    else if (item == "cse") o.cse = false;
    else if (item == "fuse") o.fuse = false;
    else if (item == "fuse_norm") o.fuse_norm = false;
    else if (item == "fuse_epilogue") o.fuse_epilogue = false;
    else if (item == "fuse_dequant") o.fuse_dequant = false;
    else if (item == "fuse_rope") o.fuse_rope = false;
    else if (item == "elide_concat") o.elide_concat = false;
    else if (item == "plan") o.plan = false;
    else if (item == "inplace") o.inplace = false;
    else if (item == "all") o.dce = o.cse = o.fuse = o.fuse_norm = o.fuse_epilogue = o.fuse_dequant = o.fuse_rope = o.elide_concat = o.plan = o.inplace =
          false;
    else if (!item.empty())
      fail("compile", source, ": unknown pass '", item, "' (expected dce, cse, fuse, fuse_norm, fuse_epilogue, fuse_dequant, fuse_rope, elide_concat, plan, inplace or all)");
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return o;
}

CompileOptions apply_env(CompileOptions o) {
  const char* v = std::getenv("DIFFQ_COMPILE_DISABLE");
  return v ? disable_passes(o, v, "DIFFQ_COMPILE_DISABLE") : o;
}

}  // namespace diffq::compile
