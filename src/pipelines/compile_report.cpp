#include "pipelines/compile_report.h"

namespace diffq {

DiffusionPipeline::CompileReport make_compile_report(const std::vector<const compile::CompiledModule*>& mods,
                                                     bool autotune) {
  const compile::CompileStats st = compile::total_stats(mods);
  DiffusionPipeline::CompileReport r;
  r.compiled = !mods.empty();
  r.graphs = st.captures;
  r.cache_hits = st.hits;
  r.eager_fallbacks = st.eager_fallbacks;
  r.opaque_nodes = st.last_passes.opaque_nodes;
  r.quantized_gemm_nodes = st.last_passes.fused_dequant;
  r.compile_s = st.compile_seconds;
  r.autotune = autotune;
  r.autotune_nodes = st.autotune.nodes;
  r.autotune_tuned = st.autotune.tuned;
  r.autotune_candidates = st.autotune.candidates;
  r.autotune_cache_hits = st.autotune.cache_hits;
  r.autotune_non_default = st.autotune.non_default;
  r.autotune_s = st.autotune.seconds;
  for (const auto* m : mods)
    if (r.autotune_cache_file.empty()) r.autotune_cache_file = m->autotune_cache_file();
  r.declined_passes = st.last_passes.declined;
  r.declined_why = st.last_passes.declined_why;
  r.device_graphs = st.device_graphs.captures;
  r.device_graph_replays = st.device_graphs.replays;
  r.device_graph_warmups = st.device_graphs.warmups;
  r.device_graph_refused = st.device_graphs.refused;
  r.device_graph_refusal = st.device_graphs.last_refusal;
  return r;
}

}  // namespace diffq
