// The executor: runs a compiled graph's nodes in order on real buffers (arena views when planned): op
// nodes through their device's kernels, fused nodes through the device's compile backend.
#include "compiled_graph.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "compile/passes.h"
#include "diffq/error.h"
#include "modules/layers.h"
#include "modules/module.h"
#include "quant/quantized_weight.h"

namespace diffq::compile {

namespace {
Tensor view_of(const Tensor& base, const Ref& r) {
  return Tensor(base.storage(), r.shape, r.strides, base.offset() + r.offset, r.dtype);
}

// An elided concat: the inputs whose producers did not write into `out` are copied into their slices.
template <class Resolve>
void copy_into_slices(const Node& n, const Resolve& resolve, Tensor& out) {
  const int64_t rank = out.dim(), dim = n.attrs.i0 < 0 ? n.attrs.i0 + rank : n.attrs.i0;
  const ops::KernelFn copy = ops::find_kernel(ops::OpKind::copy, out.device().kind);
  int64_t at = 0;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Ref& r = n.inputs[k];
    const int64_t width = r.shape[size_t(dim)];
    if (!n.placed[k] && width > 0 && shape_numel(r.shape) > 0) {
      Tensor slice(out.storage(), r.shape, out.strides(), out.offset() + at * out.strides()[size_t(dim)], out.dtype());
      copy(ops::OpCall{ops::OpKind::copy, {resolve(r)}, {}}, slice);
    }
    at += width;
  }
}

// The Linear of a quantized GEMM prologue: the quantized Linear at `path` under the module being run (in
// regional compilation, the block being run), with its bias. A dense weight captured packed for the
// device's GEMM is packed here if it is not yet (another block of the same graph), else computed dense.
QuantizedLinear quantized_linear(const CompileBackend& backend, Module* root, const std::string& path, const Tensor& x) {
  check(root != nullptr, "compile", "the quantized GEMM of ", path, " needs the root module");
  auto* lin = dynamic_cast<Linear*>(root->find_module(path));
  check(lin != nullptr, "compile", "module '", path, "' is not a Linear under ", root->type_name());
  if (!lin->weight.is_quantized() && lin->hooks().empty() && !lin->adapter &&
      !lin->weight.pack_for_linear(x.dtype(), x.device()))
    return {nullptr, lin->has_bias ? lin->bias.dense() : Tensor(), lin->weight.dense()};
  check(lin->weight.packed_form() && backend.quantized_linear_in_parts(*lin->weight.packed_form()) &&
            lin->hooks().empty() && !lin->adapter,
        "compile", "'", path,
        "' was captured as a quantized Linear computed in parts with no hooks and no LoRA, but is not one now "
        "(a LoRA loaded after compile on a layer that had none needs a recompile)");
  return {lin->weight.packed_form(), lin->has_bias ? lin->bias.dense() : Tensor()};
}

// The passes the device's compile backend does not offer (all of them without one) are turned off in
// `o`; returns those that were on (dce and cse are every device's: they only remove nodes).
std::vector<std::string> decline_device_passes(CompileOptions& o, const CompileBackend* b) {
  std::vector<std::string> declined;
  auto decline = [&](bool& on, const char* name) {
    if (b && b->offers(name)) return;
    if (on) declined.push_back(name);
    on = false;
  };
  decline(o.fuse, "fuse");
  decline(o.fuse_norm, "fuse_norm");
  decline(o.fuse_epilogue, "fuse_epilogue");
  decline(o.fuse_dequant, "fuse_dequant");
  decline(o.fuse_rope, "fuse_rope");
  decline(o.elide_concat, "elide_concat");
  decline(o.plan, "plan");
  decline(o.inplace, "inplace");
  if (o.mode == CompileMode::max_autotune && !(b && b->offers("autotune"))) declined.push_back("autotune");
  return declined;
}

// A concat of graph inputs (Node::alias_inputs) as a view of their buffer: when the resolved inputs are,
// in order, the slices of one row-major region of one storage at the concat's positions. Else undefined.
Tensor alias_of_inputs(const Node& n, const std::vector<Tensor>& ins) {
  const Shape& shape = n.out.shape;
  const int64_t rank = int64_t(shape.size()), dim = n.attrs.i0 < 0 ? n.attrs.i0 + rank : n.attrs.i0;
  const Shape hs = contiguous_strides(shape);
  int64_t at = 0;
  for (const Tensor& t : ins) {
    if (!t.defined() || t.dtype() != n.out.dtype || t.storage() != ins[0].storage() || t.dim() != rank) return Tensor();
    for (int64_t d = 0; d < rank; ++d)
      if (t.size(d) != 1 && t.strides()[size_t(d)] != hs[size_t(d)]) return Tensor();
    if (t.offset() != ins[0].offset() + at * hs[size_t(dim)]) return Tensor();
    at += t.size(dim);
  }
  if (at != shape[size_t(dim)]) return Tensor();
  return Tensor(ins[0].storage(), shape, hs, ins[0].offset(), n.out.dtype);
}

// DIFFQ_COMPILE_DUMP=1: the graph after the passes, then the arena and the buffers alive at its peak.
void dump_plan(const Graph& g, const MemoryPlan& p) {
  std::fprintf(stderr, "%s", g.dump().c_str());
  const LivePeak peak = live_peak(p);
  std::fprintf(stderr, "arena %.2f MiB (%.2f MiB unplanned); most alive at %%%d: %.2f MiB in %zu buffers\n",
               double(p.arena_bytes) / 1048576.0, double(p.unplanned_bytes) / 1048576.0, peak.at,
               double(peak.bytes) / 1048576.0, peak.live.size());
  for (const PlannedBuffer& b : peak.live)
    std::fprintf(stderr, "  %%%d %s %s, %.2f MiB, alive %%%d..%%%d\n", b.node,
                 b.node >= 0 ? g.nodes[size_t(b.node)].label().substr(0, 60).c_str() : "?",
                 b.node >= 0 ? shape_str(g.nodes[size_t(b.node)].out.shape).c_str() : "", double(b.size) / 1048576.0,
                 b.first, b.last);
}
}  // namespace

CompiledGraph compile_graph(Graph g, const CompileOptions& options) {
  CompiledGraph c;
  c.backend = find_compile_backend(g.device.kind);
  CompileOptions o = options;
  c.stats.declined = decline_device_passes(o, c.backend);
  if (!c.stats.declined.empty())
    c.stats.declined_why = c.backend ? g.device.str() + "'s compile backend does not offer them: those parts run op by op "
                                                        "through its kernels"
                                     : g.device.str() + " has no compile backend: the graph runs op by op through its kernels";
  c.stats.captured_nodes = int64_t(g.nodes.size());
  if (o.dce) c.stats.dce_removed = eliminate_dead_code(g);
  if (o.cse) {
    c.stats.cse_merged = eliminate_common_subexpressions(g);
    if (o.dce) c.stats.dce_removed += eliminate_dead_code(g);
  }
  if (o.fuse) c.stats.fused_ops = fuse_elementwise(g);
  if (o.fuse && o.fuse_norm) c.stats.fused_norms = fuse_norm_prologue(g);
  if (o.fuse_epilogue) c.stats.fused_epilogues = fuse_gemm_epilogue(g, o.fuse_dequant);
  if (o.fuse_rope) c.stats.fused_ropes = fuse_norm_rope(g);
  if (o.elide_concat) c.stats.placed_in_concat = elide_concats(g);
  c.plan = plan_memory(g, o.plan, o.inplace);
  if (const char* d = std::getenv("DIFFQ_COMPILE_DUMP"); d && *d && std::string_view(d) != "0") dump_plan(g, c.plan);
  c.stats.final_nodes = int64_t(g.nodes.size());
  c.stats.fused_nodes = g.count(Node::Kind::fused);
  c.stats.opaque_nodes = g.count(Node::Kind::opaque);
  for (const Node& n : g.nodes) c.stats.fused_dequant += n.kind == Node::Kind::fused && n.program->gemm && !n.program->gemm->module.empty();
  for (const Node& n : g.nodes) {
    ops::KernelFn fn = nullptr;
    if (n.kind == Node::Kind::op) {
      Device where = n.out.device;
      if (n.op == ops::OpKind::to_device && !where.is_cuda() && !n.inputs.empty()) where = Device::cpu();
      fn = n.op == ops::OpKind::to_device ? nullptr : ops::find_kernel(n.op, where.kind);
      check(fn != nullptr || n.op == ops::OpKind::to_device, "compile", "no kernel for ", ops::op_name(n.op), " on ",
            where.str());
    }
    c.kernels.push_back(fn);
  }
  c.graph = std::move(g);
  return c;
}

std::vector<Tensor> CompiledGraph::run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& params,
                                       Module* root, const OpHook& before_op) const {
  const Graph& g = graph;
  check(inputs.size() == g.inputs.size(), "compile", "graph expects ", g.inputs.size(), " inputs, got ",
        inputs.size());
  std::vector<Tensor> in(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!g.input_defined[i]) continue;
    const BufferMeta& m = g.inputs[i];
    check(inputs[i].defined() && inputs[i].shape() == m.shape && inputs[i].dtype() == m.dtype &&
              inputs[i].device() == m.device,
          "compile", "input ", i, " is ", inputs[i].defined() ? inputs[i].str() : "undefined",
          " but the graph was captured with ", shape_str(m.shape), " ", dtype_name(m.dtype));
    in[i] = inputs[i].is_contiguous() ? inputs[i] : inputs[i].contiguous();
  }
  std::shared_ptr<Storage> arena;
  if (plan.enabled && plan.arena_bytes > 0) arena = Storage::allocate(size_t(plan.arena_bytes), plan.device);

  std::vector<Tensor> values(g.nodes.size());
  // Node i's own buffer: its arena bytes when planned, else a fresh allocation.
  auto own_buffer = [&](size_t i) {
    const Node& n = g.nodes[i];
    if (plan.offset[i] >= 0) {
      const int64_t es = int64_t(dtype_size(n.out.dtype));
      return Tensor(arena, n.out.shape, contiguous_strides(n.out.shape), plan.offset[i] / es, n.out.dtype);
    }
    return Tensor::empty(n.out.shape, n.out.dtype, n.out.device);
  };
  // An elided concat's buffer, made when its first producer runs.
  auto host_buffer = [&](size_t h) -> const Tensor& {
    if (!values[h].defined()) values[h] = own_buffer(h);
    return values[h];
  };
  auto resolve = [&](const Ref& r) -> Tensor {
    switch (r.src) {
      case Ref::Src::none: return Tensor();
      case Ref::Src::input: return view_of(in[size_t(r.index)], r);
      case Ref::Src::param: {
        const Tensor& p = params.at(size_t(r.index));
        check(p.defined(), "compile", "parameter ", r.index, " is not a dense tensor at run time");
        return view_of(p, r);
      }
      case Ref::Src::value: return view_of(values[size_t(r.index)], r);
      case Ref::Src::constant: return view_of(g.constants[size_t(r.index)], r);
    }
    return Tensor();
  };

  auto resolve_all = [&](const Node& n) {
    std::vector<Tensor> v;
    v.reserve(n.inputs.size());
    for (const Ref& r : n.inputs) v.push_back(resolve(r));
    return v;
  };
  // Node i's kernel tuning (max-autotune), installed on this thread while the guard lives.
  auto install_tuning = [&](size_t i) -> std::shared_ptr<void> {
    return i < tuning.size() && !tuning[i].is_default() ? backend->install(tuning[i]) : nullptr;
  };

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == Node::Kind::opaque) {
      check(root != nullptr, "compile", "opaque node ", n.module_path, " needs the root module");
      Module* m = root->find_module(n.module_path);
      check(m != nullptr, "compile", "module '", n.module_path, "' not found under ", root->type_name());
      Tensor y = n.opaque(*m, resolve(n.inputs[0]));
      check(y.shape() == n.out.shape && y.dtype() == n.out.dtype, "compile", "module '", n.module_path,
            "' returned ", y.str(), " but the graph was captured with ", shape_str(n.out.shape));
      values[i] = y.is_contiguous() && y.offset() == 0 ? y : y.contiguous();
    } else if (Tensor alias; n.alias_inputs && (alias = alias_of_inputs(n, resolve_all(n))).defined()) {
      values[i] = std::move(alias);
    } else if (n.kind == Node::Kind::op && (kernels[i] == nullptr || backend == nullptr)) {
      // to_device (the backend picks the side), or a graph on a device without a compile backend: the
      // dispatcher runs the device's kernel into a fresh tensor, as eagerly.
      const ops::OpCall call{n.op, resolve_all(n), n.attrs};
      if (before_op) before_op(i, call);
      values[i] = ops::execute(call);
    } else {
      Tensor out;
      if (n.host >= 0) {
        const Tensor& h = host_buffer(size_t(n.host));
        out = Tensor(h.storage(), n.out.shape, n.host_strides, h.offset() + n.host_offset, n.out.dtype);
      } else {
        out = n.elided ? host_buffer(i) : own_buffer(i);
      }
      if (n.elided) {
        copy_into_slices(n, resolve, out);
      } else if (n.kind == Node::Kind::fused) {
        const std::vector<Tensor> leaves = resolve_all(n);
        if (before_op && n.program->gemm) before_op(i, ops::OpCall{n.op, leaves, n.attrs});
        const std::shared_ptr<void> tuned = install_tuning(i);  // the GEMM prologue's split
        QuantizedLinear qlinear;
        if (n.program->gemm && !n.program->gemm->module.empty())
          qlinear = quantized_linear(*backend, root, n.program->gemm->module, leaves[size_t(n.program->gemm->x)]);
        backend->run_fused(*n.program, leaves, out, &qlinear);
      } else if (n.kind == Node::Kind::norm_rope) {
        backend->run_norm_rope(*n.norm_rope, resolve_all(n), out);
      } else {
        const ops::OpCall call{n.op, resolve_all(n), n.attrs};
        if (before_op) before_op(i, call);
        const std::shared_ptr<void> tuned = install_tuning(i);
        if (n.op == ops::OpKind::linear && !out.is_contiguous()) {
          backend->run_linear_strided(call.inputs, out);  // placed in a concat: the GEMM writes with the slice's ld
        } else if (out.numel() > 0) {
          kernels[i](call, out);
        }
      }
      values[i] = std::move(out);
    }
    // Buffers with their own allocation are released after their last reader.
    for (const Ref& r : n.inputs)
      if (r.src == Ref::Src::value && plan.last_use[size_t(r.index)] == int32_t(i) && plan.offset[size_t(r.index)] < 0)
        values[size_t(r.index)] = Tensor();
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (const Ref& r : g.outputs) out.push_back(resolve(r));
  return out;
}

}  // namespace diffq::compile
