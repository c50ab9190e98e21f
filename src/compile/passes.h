// The graph passes, one file each. Each rewrites the graph in place and returns how many nodes it
// removed or merged (for stats and tests). The fusing passes and elide_concats touch only the nodes on the
// graph's device (Graph::on_graph_device), and compile_graph runs them only where that device has a
// compile backend to run what they make (compile_backend.h).
#pragma once

#include <cstdint>

#include "compile/graph.h"

namespace diffq::compile {

int64_t eliminate_dead_code(Graph& g);          // dce.cpp: nodes no output depends on
int64_t eliminate_common_subexpressions(Graph& g);  // cse.cpp: identical op + attrs + input views
// fuse_elementwise.cpp: single-use chains of binary/scalar/clamp/unary/cast float ops of one output
// shape become one fused node. Returns the number of ops folded into fused nodes.
int64_t fuse_elementwise(Graph& g);

// fuse_norm.cpp (pattern fusion): a layer_norm / rms_norm whose output is read once, whole, by a fused
// node of the same shape is computed inside that node, row by row (LayerNorm + modulate). Returns the
// number of norms folded.
int64_t fuse_norm_prologue(Graph& g);

// fuse_epilogue.cpp (pattern fusion): a linear whose output is read once, whole, by a fused node or
// a float elementwise op of the same shape becomes that node's GEMM prologue: the GEMM runs part by
// part and the elementwise program (bias + GELU, gate * x + residual) runs on each part right after it
// (GemmPrologue). Returns the number of linears folded.
// With `quantized`, opaque quantized Linears with a tile linear (Node::quantized_linear) are folded too
// (GemmPrologue::module: dequantize inside the GEMM), and those no elementwise node reads become fused
// nodes of their own (program: the GEMM's part), planned like any node. Returns the linears folded.
int64_t fuse_gemm_epilogue(Graph& g, bool quantized = true);

// fuse_rope.cpp (pattern fusion): rope(rms_norm(x)) and rope(concat_dim1(rms_norm(a), rms_norm(b), ...)),
// each intermediate read once, become one norm_rope node computing both per row (FLUX's q / k in the
// single and the joint blocks). Returns the number of rope ops matched.
int64_t fuse_norm_rope(Graph& g);

// elide_concat.cpp: a concat's producers that only it reads and that can write through a strided view
// (plan below) compute their output straight into their slice of the concat's buffer (Node::host); the
// concat becomes `elided` (it copies only the other inputs) and the placed producers move to just
// before it. Returns the number of producers placed.
// It also marks concats of graph inputs only (Node::alias_inputs; not counted).
int64_t elide_concats(Graph& g);
// The one row stride of a view of `shape` with `strides` whose last stride is 1 and whose outer dims
// (size-1 dims ignored) merge into one run of rows, else -1 (the GEMM writers' `ld`).
int64_t uniform_row_stride(const Shape& shape, const Shape& strides);

// Whether a node is a float elementwise op the fuser (and the in-place planner) understands.
bool is_fusable_elementwise(const Graph& g, const Node& n);

}  // namespace diffq::compile
