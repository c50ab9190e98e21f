// A graph after the passes, with its memory plan: what the executor runs on real inputs.
#pragma once

#include <functional>
#include <vector>

#include "backend/cpu/tuning.h"
#include "compile/compile_options.h"
#include "compile/graph.h"
#include "compile/plan_memory.h"

namespace diffq::compile {

struct PassStats {
  int64_t captured_nodes = 0;
  int64_t dce_removed = 0, cse_merged = 0, fused_ops = 0, fused_norms = 0;
  int64_t fused_epilogues = 0, fused_ropes = 0;  // linears run as GEMM prologues; RMSNorm + RoPE nodes
  int64_t fused_dequant = 0;  // of fused_epilogues: quantized linears (dequantize inside the GEMM)
  int64_t placed_in_concat = 0;  // producers writing straight into a concat's buffer (elide_concat)
  int64_t final_nodes = 0, fused_nodes = 0, opaque_nodes = 0;
};

struct CompiledGraph {
  Graph graph;
  MemoryPlan plan;
  PassStats stats;
  std::vector<ops::KernelFn> kernels;  // per op node
  // Per node: the kernel tuning installed around it (max-autotune, autotune.h); defaults when empty.
  std::vector<backend::cpu::Tuning> tuning;

  // Called before each op node's kernel runs, with its call on real inputs (the autotuner times here),
  // and before each fused node with a GEMM prologue, with its leaves as the call's inputs.
  using OpHook = std::function<void(size_t node, const ops::OpCall& call)>;

  // inputs: one per graph input (absent ones undefined); params: the root module's dense parameters in
  // named_parameters() order (quantized ones undefined); root: the module opaque nodes resolve against.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& params, Module* root,
                          const OpHook& before_op = nullptr) const;
};

// Runs the enabled passes (o) over g and plans its memory.
CompiledGraph compile_graph(Graph g, const CompileOptions& o);

}  // namespace diffq::compile
