// The compiler's graph IR. A captured forward becomes a list of nodes in execution order, each with one
// output buffer (contiguous, of a known shape/dtype/device). Node inputs are views (shape, strides,
// offset) of a buffer that is a graph input, a module parameter (by its index in the root module's
// named_parameters(), so one graph serves every module of the same structure), another node's output,
// or a constant captured during tracing. Nodes are ops of the op vocabulary, fused elementwise
// programs, or opaque calls of a real submodule (what cannot be traced: quantized linears, hooked
// modules).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "ops/op.h"

namespace diffq {
class Module;
}

namespace diffq::compile {

struct Ref {
  enum class Src : uint8_t { none, input, param, value, constant };
  Src src = Src::none;
  int32_t index = -1;  // graph input / parameter / node / constant index
  Shape shape, strides;
  int64_t offset = 0;  // elements, relative to the start of the buffer (parameters: of the parameter's view)
  DType dtype = DType::f32;

  bool defined() const { return src != Src::none; }
  bool same_view(const Ref& o) const {
    return src == o.src && index == o.index && shape == o.shape && strides == o.strides && offset == o.offset &&
           dtype == o.dtype;
  }
  // The whole buffer of `shape`, read contiguously from its start.
  bool is_whole(const Shape& buffer_shape) const {
    return offset == 0 && shape == buffer_shape && strides == contiguous_strides(shape);
  }
};

struct BufferMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device{};
  size_t nbytes() const { return size_t(shape_numel(shape)) * dtype_size(dtype); }
};

// One instruction of a fused elementwise program. Every instruction yields one f32 register (its index
// in the program), rounded to `dtype` when that is a 16-bit float, as the eager op rounds its output.
struct Instr {
  enum class Op : uint8_t { load, binary, scalar, clamp, unary, cast };
  Op op = Op::load;
  int32_t a = -1, b = -1;  // load: leaf index; others: register operands
  int64_t fn = 0;          // BinaryFn / ScalarFn / UnaryFn
  float s0 = 0.f, s1 = 0.f;
  DType dtype = DType::f32;
};

// A LayerNorm / RMSNorm over the last dim computed per output row before the program runs (pattern
// fusion: LayerNorm + modulate, RMSNorm + scale): the load of leaf `leaf` reads the normalized row.
struct NormPrologue {
  bool rms = false;
  double eps = 0;
  int32_t leaf = -1;         // the leaf that stood for the norm's output
  int32_t x = -1, w = -1, b = -1;  // leaves holding the norm's inputs (w, b: -1 when absent)
  DType dtype = DType::f32;  // the norm's output dtype (its rounding)
};

// A linear (x @ w^T + b) computed inside the fused node that reads its output (pattern fusion: GEMM
// epilogue, e.g. bias + GELU, gate * x + residual): the GEMM runs part by part and the program runs on
// each part of the output right after it is computed; the load of leaf `leaf` reads the part (the
// linear's f32 result rounded to `dtype`, as the linear op rounds its output). The linear's output
// buffer is never allocated. `leaf` itself is an undefined input of the node.
//
// Quantized (dequantize inside the GEMM): `module` names a Linear (relative to the root module) whose
// quantized weight computes its linear in parts on the graph's device
// (CompileBackend::quantized_linear_in_parts: on the CPU weight tiles dequantized into the f32 GEMM, or
// int8dq's int8 GEMM); the GEMM is that scheme's, with its bias, found in the module being run, and only
// x is a leaf (w = b = -1).
struct GemmPrologue {
  int32_t leaf = -1;
  int32_t x = -1, w = -1, b = -1;  // leaves holding the linear's inputs (b: -1 when absent)
  DType dtype = DType::f32;        // the linear's output dtype
  std::string module;              // non-empty: a quantized Linear's path
};

struct FusedProgram {
  std::vector<Instr> code;  // the result is the last register
  std::optional<NormPrologue> norm;
  std::optional<GemmPrologue> gemm;  // never together with norm
  std::string str() const;  // "load0 load1 mul(0,1) silu(2)"
};

// RMSNorm over the head dim then RoPE, as one node (pattern fusion on FLUX's q / k): rope(x) where x is
// one rms_norm or a concat along the sequence (dim 1) of rms_norms, out = [B, S, H, D]. Each segment
// is one norm: sequence positions [s0, s0 + len) of the output come from its input x[B, len, H, D].
struct NormRope {
  struct Segment {
    int64_t s0 = 0, len = 0;
    int32_t x = -1, w = -1;  // leaves (w: -1 when the norm has no weight)
    double eps = 0;
  };
  std::vector<Segment> segments;
  int32_t cos = -1, sin = -1;  // leaves: [S, D] tables
  DType norm_dtype = DType::f32;  // the norms' (and concat's) output dtype: the rounding before RoPE
  std::string str() const;
};

// Calls the real submodule at `path` (relative to the root module) on one real input.
using OpaqueFn = std::function<Tensor(Module& m, const Tensor& x)>;

struct Node {
  enum class Kind : uint8_t { op, fused, opaque, norm_rope };
  Kind kind = Kind::op;
  ops::OpKind op = ops::OpKind::copy;
  ops::Attrs attrs;
  std::vector<Ref> inputs;  // fused: the leaves
  BufferMeta out;
  std::shared_ptr<const FusedProgram> program;  // fused
  std::shared_ptr<const NormRope> norm_rope;    // norm_rope
  std::string module_path;                      // opaque
  OpaqueFn opaque;                              // opaque
  // Opaque: the module is a Linear without hooks whose quantized weight computes its linear in parts on
  // the graph's device (CompileBackend::quantized_linear_in_parts), so the node can become a quantized
  // GEMM prologue (fuse_epilogue.cpp).
  bool quantized_linear = false;
  // Concat elision (elide_concat.cpp): the node writes its output straight into node `host`'s buffer,
  // as the view (out.shape, host_strides, host_offset in elements) of it, and has no buffer of its own.
  int32_t host = -1;
  Shape host_strides;
  int64_t host_offset = 0;
  // A concat whose buffer its producers write into: it runs no kernel, it only copies the inputs whose
  // producers do not write in place (inputs[k] with placed[k] false) into their slices.
  bool elided = false;
  std::vector<bool> placed;  // elided: per input
  // A concat of graph inputs only (regional compile: a block's cat([txt, img]) of the previous block's
  // output slices): when at run time the inputs lie in one buffer, in order, its output is a view of that
  // buffer (no copy, no allocation); else a copy into a buffer of its own. Never planned in the arena,
  // never written in place.
  bool alias_inputs = false;
  std::string label() const;                    // op name, "fused[...]", "opaque(path)" or "norm_rope[...]"
};

// The instruction of an elementwise op node (binary / scalar / clamp / unary / cast) reading
// registers a (and b for binary).
Instr elementwise_instr(const Node& n, int32_t a, int32_t b);

struct Graph {
  // Where the graph runs: the device of its inputs (else of its parameters) at capture. The fusing passes
  // fuse the nodes on it, for its compile backend (compile_backend.h) to run.
  Device device{};
  std::vector<BufferMeta> inputs;
  std::vector<bool> input_defined;  // an optional input that was absent at capture stays absent
  std::vector<Tensor> constants;
  std::vector<Node> nodes;
  std::vector<Ref> outputs;

  // Number of node inputs/outputs reading node `i`'s buffer (graph outputs count once each).
  std::vector<int> use_counts() const;
  bool is_output(int32_t node) const;
  bool on_graph_device(const Node& n) const { return n.out.device == device; }
  std::string dump() const;
  int64_t count(Node::Kind k) const;
};

// Keeps the nodes with keep[i] (in order) and renumbers value references.
void compact(Graph& g, const std::vector<bool>& keep);
// Puts the nodes in the order `order` (a permutation of the node indices in which every node comes after
// the nodes it reads) and renumbers value references.
void reorder(Graph& g, const std::vector<int32_t>& order);
// Replaces every read of node `from`'s buffer by node `to`'s (same meta).
void redirect(Graph& g, int32_t from, int32_t to);

}  // namespace diffq::compile
