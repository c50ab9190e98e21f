// Options of a compiled forward (the seeds' torch.compile knobs, plus one switch per pass so each can be
// turned off for debugging). DIFFQ_COMPILE_DISABLE=dce,cse,fuse,fuse_norm,fuse_epilogue,fuse_dequant,fuse_rope,elide_concat,plan,inplace
// turns passes off for the
// whole process on top of what the options say.
#pragma once

#include <string>
#include <string_view>

namespace diffq::compile {

enum class CompileMode { default_mode, reduce_overhead, max_autotune };

struct CompileOptions {
  CompileMode mode = CompileMode::default_mode;
  // true: code that cannot be captured is an error; false: that input signature runs eagerly.
  bool fullgraph = false;
  bool dce = true;      // dead-code elimination
  bool cse = true;      // common-subexpression elimination
  bool fuse = true;     // elementwise fusion
  bool fuse_norm = true;  // pattern fusion: a LayerNorm/RMSNorm computed inside the fused node reading it
  bool fuse_epilogue = true;  // pattern fusion: a linear run as the GEMM prologue of the elementwise node reading it
  // pattern fusion: a quantized linear (a scheme that dequantizes W into the f32 GEMM) run as such a GEMM
  // prologue too: "dequantize inside the GEMM" (needs fuse_epilogue)
  bool fuse_dequant = true;
  bool fuse_rope = true;      // pattern fusion: RMSNorm + RoPE on q/k as one node
  bool elide_concat = true;   // a concat's producers write straight into its buffer (no copy, no extra buffer)
  bool plan = true;     // static memory planning (one arena per run, liveness-based reuse)
  bool inplace = true;  // planner: an elementwise node writes over an input that dies there

  // mode == max_autotune (compile/autotune.h). The cache file: empty = DIFFQ_AUTOTUNE_CACHE, else
  // $XDG_CACHE_HOME/diffq/autotune.json, else ~/.cache/diffq/autotune.json.
  std::string autotune_cache;
  std::string autotune_processor;   // the cache's processor key; empty = this machine's (tests set others)
  int autotune_reps = 5;            // timed rounds per candidate (the median decides)
  int autotune_max_candidates = 0;  // 0 = every candidate; else the first N of each node (fast tests)
  double autotune_margin = 0.03;    // a candidate replaces the defaults only when this much faster

  // A short stable description ("dce,cse,fuse,fuse_norm,fuse_epilogue,fuse_dequant,fuse_rope,elide_concat,plan,
  // inplace") used in cache keys and messages.
  std::string passes_str() const;
};

CompileMode parse_compile_mode(std::string_view name);  // "default" | "reduce-overhead" | "max-autotune"
std::string_view compile_mode_name(CompileMode m);

// `o` with the passes named in DIFFQ_COMPILE_DISABLE (comma separated) turned off. Unknown names are an
// Error naming the variable and the value.
CompileOptions apply_env(CompileOptions o);
// The same from an explicit list (tests).
CompileOptions disable_passes(CompileOptions o, std::string_view comma_list, std::string_view source);

}  // namespace diffq::compile
