// A compiled forward: captures on the first call of each input signature (shapes, dtypes and devices of
// the inputs; names, shapes, dtypes / quantization schemes and devices of the module's parameters;
// the pass options), compiles, caches, and replays on later calls. Since parameters are graph inputs,
// one CompiledModule serves every module of the same structure (regional compilation: one graph for
// all identical transformer blocks). A signature whose forward cannot be captured runs eagerly
// (fullgraph=false, the reason kept in stats) or is an Error (fullgraph=true).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "compile/autotune.h"
#include "compile/capture.h"
#include "compile/compiled_graph.h"
#include "compile/device_graphs.h"

namespace diffq::compile {

struct CompileStats {
  int64_t captures = 0;         // signatures captured and compiled
  int64_t hits = 0;             // calls served by a cached graph
  int64_t eager_fallbacks = 0;  // calls run eagerly because their signature could not be captured
  double compile_seconds = 0;   // capture + passes + planning, all signatures
  std::string last_fallback_reason;
  PassStats last_passes;            // of the most recently compiled signature
  int64_t last_arena_bytes = 0;     // its planned arena
  int64_t last_unplanned_bytes = 0; // what its planned buffers would take without reuse
  AutotuneStats autotune;           // max-autotune, all signatures (tuning time is not in compile_seconds)
  DeviceGraphStats device_graphs;   // reduce-overhead on a device: captured graphs (device_graphs.h)
};

class CompiledModule {
 public:
  // `o` is taken as given; DIFFQ_COMPILE_DISABLE is applied on top.
  CompiledModule(ForwardFn fwd, CompileOptions o);

  // With mode reduce-overhead and inputs on a device, the call goes through a captured device graph
  // (device_graphs.h); otherwise the compiled graph (or the eager forward) runs op by op.
  std::vector<Tensor> run(Module& m, const std::vector<Tensor>& inputs);

  CompileStats stats() const;
  const CompileOptions& options() const { return opt_; }
  // The compiled graph of the signature of (m, inputs); nullptr when not compiled (tests, dumps).
  std::shared_ptr<const CompiledGraph> graph_for(Module& m, const std::vector<Tensor>& inputs) const;
  static std::string signature(Module& m, const std::vector<Tensor>& inputs);
  // max-autotune: every choice known (node key -> tuning) and the cache file; empty before the first run.
  TuningTable autotune_choices() const;
  std::string autotune_cache_file() const;

 private:
  struct Entry {
    std::shared_ptr<const CompiledGraph> graph;  // null: eager fallback
    std::string reason;
  };
  std::vector<Tensor> run_signature(Module& m, const std::string& sig, const std::vector<Tensor>& inputs);

  ForwardFn fwd_;
  CompileOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> cache_;
  CompileStats stats_;
  std::unique_ptr<Autotuner> tuner_;  // max-autotune: made on the first compile
  DeviceGraphs graphs_;               // reduce-overhead on a device
};

// The stats of several compiled modules (a model's regional graphs) added up: captures, hits, fallbacks,
// compile and autotune figures summed; last_passes.opaque_nodes / fused_dequant summed over the graphs
// compiled last by each, last_passes.declined their union (and the first reason); empty when `mods` is.
CompileStats total_stats(const std::vector<const CompiledModule*>& mods);

// The dense parameters of `m` in named_parameters() order (quantized, packed or unloaded ones undefined;
// with `g`, also those g never reads: a weight g computes packed is not held dense while it packs).
std::vector<Tensor> dense_parameters(Module& m, const CompiledGraph* g = nullptr);

}  // namespace diffq::compile
