// The executor: runs a compiled graph's nodes in order on real buffers (arena views when planned).
#include "compiled_graph.h"

#include <optional>

#include "compile/fused_kernel.h"
#include "compile/passes.h"
#include "diffq/error.h"
#include "modules/module.h"

namespace diffq::compile {

namespace {
Tensor view_of(const Tensor& base, const Ref& r) {
  return Tensor(base.storage(), r.shape, r.strides, base.offset() + r.offset, r.dtype);
}
}  // namespace

CompiledGraph compile_graph(Graph g, const CompileOptions& o) {
  CompiledGraph c;
  c.stats.captured_nodes = int64_t(g.nodes.size());
  if (o.dce) c.stats.dce_removed = eliminate_dead_code(g);
  if (o.cse) {
    c.stats.cse_merged = eliminate_common_subexpressions(g);
    if (o.dce) c.stats.dce_removed += eliminate_dead_code(g);
  }
  if (o.fuse) c.stats.fused_ops = fuse_elementwise(g);
  if (o.fuse && o.fuse_norm) c.stats.fused_norms = fuse_norm_prologue(g);
  if (o.fuse_epilogue) c.stats.fused_epilogues = fuse_gemm_epilogue(g);
  if (o.fuse_rope) c.stats.fused_ropes = fuse_norm_rope(g);
  c.plan = plan_memory(g, o.plan, o.inplace);
  c.stats.final_nodes = int64_t(g.nodes.size());
  c.stats.fused_nodes = g.count(Node::Kind::fused);
  c.stats.opaque_nodes = g.count(Node::Kind::opaque);
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
    } else {
      Tensor out;
      if (plan.offset[i] >= 0) {
        const int64_t es = int64_t(dtype_size(n.out.dtype));
        out = Tensor(arena, n.out.shape, contiguous_strides(n.out.shape), plan.offset[i] / es, n.out.dtype);
      } else {
        out = Tensor::empty(n.out.shape, n.out.dtype, n.out.device);
      }
      if (n.kind == Node::Kind::fused) {
        std::vector<Tensor> leaves;
        leaves.reserve(n.inputs.size());
        for (const Ref& r : n.inputs) leaves.push_back(resolve(r));
        if (before_op && n.program->gemm) before_op(i, ops::OpCall{n.op, leaves, n.attrs});
        std::optional<backend::cpu::ScopedTuning> tuned;  // the GEMM prologue's split
        if (i < tuning.size() && tuning[i] != backend::cpu::Tuning{}) tuned.emplace(tuning[i]);
        run_fused(*n.program, leaves, out);
      } else if (n.kind == Node::Kind::norm_rope) {
        std::vector<Tensor> leaves;
        for (const Ref& r : n.inputs) leaves.push_back(resolve(r));
        run_norm_rope(*n.norm_rope, leaves, out);
      } else {
        ops::OpCall call{n.op, {}, n.attrs};
        call.inputs.reserve(n.inputs.size());
        for (const Ref& r : n.inputs) call.inputs.push_back(resolve(r));
        if (before_op) before_op(i, call);
        std::optional<backend::cpu::ScopedTuning> tuned;
        if (i < tuning.size() && tuning[i] != backend::cpu::Tuning{}) tuned.emplace(tuning[i]);
        if (kernels[i] == nullptr) {
          out = ops::execute(call);  // to_device: the backend picks the side
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
