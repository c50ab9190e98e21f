// A graph after the passes, with its memory plan: what the executor runs on real inputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compile/compile_backend.h"
#include "compile/compile_options.h"
#include "compile/graph.h"
#include "compile/kernel_tuning.h"
#include "compile/plan_memory.h"

namespace diffq::compile {

struct PassStats {
  int64_t captured_nodes = 0;
  int64_t dce_removed = 0, cse_merged = 0, fused_ops = 0, fused_norms = 0;
  int64_t fused_epilogues = 0, fused_ropes = 0;  // linears run as GEMM prologues; RMSNorm + RoPE nodes
  int64_t fused_dequant = 0;  // of fused_epilogues: quantized linears (dequantize inside the GEMM)
  int64_t placed_in_concat = 0;  // producers writing straight into a concat's buffer (elide_concat)
  int64_t final_nodes = 0, fused_nodes = 0, opaque_nodes = 0;
  // The passes that were on but declined because the graph's device has no compile backend
  // (compile_backend.h): "fuse", ..., "plan", "autotune"; and why, naming the device. Empty otherwise.
  std::vector<std::string> declined;
  std::string declined_why;
};

struct CompiledGraph {
  Graph graph;
  MemoryPlan plan;
  PassStats stats;
  std::vector<ops::KernelFn> kernels;  // per op node
  // The graph device's compile backend: runs the fused nodes and installs the tunings. nullptr: the
  // device has none, the device-specific passes declined and every op node runs through the dispatcher.
  const CompileBackend* backend = nullptr;
  // Per node: the kernel tuning installed around it (max-autotune, autotune.h); defaults when empty.
  std::vector<KernelTuning> tuning;

  // Called before each op node's kernel runs, with its call on real inputs (the autotuner times here),
  // and before each fused node with a GEMM prologue, with its leaves as the call's inputs.
  using OpHook = std::function<void(size_t node, const ops::OpCall& call)>;

  // inputs: one per graph input (absent ones undefined); params: the root module's dense parameters in
  // named_parameters() order (quantized ones undefined); root: the module opaque nodes resolve against.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& params, Module* root,
                          const OpHook& before_op = nullptr) const;
};

// Runs the enabled passes (o) over g and plans its memory; on a device without a compile backend only the
// device-neutral passes (dce, cse) run and the others are recorded as declined.
CompiledGraph compile_graph(Graph g, const CompileOptions& o);

}  // namespace diffq::compile
