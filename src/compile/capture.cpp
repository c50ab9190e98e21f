#include "compile/capture.h"

#include <map>
#include <unordered_map>

#include "compile/compile_backend.h"
#include "diffq/error.h"
#include "modules/layers.h"
#include "quant/quantized_weight.h"
#include "ops/trace.h"

namespace diffq::compile {

namespace {

struct Opaque {
  std::string path;
  OpaqueFn fn;
  bool quantized_linear = false;  // a hook-free Linear whose quantized weight computes its linear in parts
};

// The graph's device: its inputs', else its dense parameters', else the cpu.
Device graph_device(Module& root, const std::vector<Tensor>& examples) {
  for (const Tensor& t : examples)
    if (t.defined()) return t.device();
  for (const auto& [name, p] : root.named_parameters())
    if (p->defined() && !p->packed_form()) return p->dense().device();
  return Device::cpu();
}

class Capturer : public CaptureHook {
 public:
  // `device`: the compile backend of the graph's device (nullptr when it has none).
  Capturer(Module& root, ops::Trace& trace, const CompileBackend* device)
      : root_(root), trace_(trace), device_(device), previous_(CaptureHook::current()) {
    for (const auto& [path, m] : root.named_modules()) paths_[m] = path;
    CaptureHook::set_current(this);
  }
  ~Capturer() override { CaptureHook::set_current(previous_); }

  void on_call(Module& m) override {
    if (&m == &root_) return;
    check(m.hooks().empty(), "compile", "module '", path(m), "' (", m.type_name(),
          ") has forward hooks (offloading?) that a compiled graph would not run; compile the regions "
          "below the hooks (compile_repeated_blocks) or use leaf-level offloading");
  }

  bool wants_opaque(Module& m, const Tensor& x) override {
    if (&m == &root_) return false;
    if (!m.hooks().empty()) return true;
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
      if (lin->adapter) return true;  // LoRA: read at run time
      // A dense weight the device packs for its GEMM (ops/weight_packing.h) is packed now and computed
      // like a quantized one: in parts where the device's compile backend can (its epilogue fused).
      if (device_ && x.defined() && lin->weight.pack_for_linear(x.dtype(), x.device())) return true;
    }
    for (const auto& [n, p] : m.own_parameters())
      if (p->packed_form()) return true;
    return false;
  }

  Tensor record_opaque(Module& m, const Tensor& x, std::function<Tensor(Module&, const Tensor&)> run) override {
    check(x.defined() && x.is_symbolic(), "compile", "opaque call of '", path(m), "' on a non-traced input");
    ops::Attrs a;
    a.i0 = int64_t(opaques_.size());
    auto* lin = dynamic_cast<Linear*>(&m);
    const bool qlin = lin && m.hooks().empty() && !lin->adapter && lin->weight.packed_form() && device_ &&
                      device_->quantized_linear_in_parts(*lin->weight.packed_form());
    opaques_.push_back({path(m), std::move(run), qlin});
    return trace_.record(ops::OpCall{ops::OpKind::count_, {x}, a}, output_meta(m, x));
  }

  const std::vector<Opaque>& opaques() const { return opaques_; }

 private:
  std::string path(const Module& m) const {
    auto it = paths_.find(&m);
    check(it != paths_.end(), "compile", "module ", m.type_name(), " is not under the compiled ", root_.type_name());
    return it->second;
  }

  // The output of a one-input layer, without running it: a quantized Linear gives [..., out] in x's
  // dtype; a dense layer's forward is traced into a scratch trace and its result's meta kept.
  ops::OutputMeta output_meta(Module& m, const Tensor& x) {
    if (auto* lin = dynamic_cast<Linear*>(&m); lin && (lin->weight.packed_form() || lin->adapter)) {
      Shape s = x.shape();
      check(!s.empty() && s.back() == lin->in_features, "compile", "'", path(m), "' expects [..., ",
            lin->in_features, "], got ", x.str());
      s.back() = lin->out_features;
      return {s, x.dtype(), x.device()};
    }
    ops::Trace scratch;
    CaptureHook::set_current(nullptr);
    Tensor y;
    try {
      if (auto* l = dynamic_cast<Linear*>(&m)) y = l->forward(x);
      else if (auto* ln = dynamic_cast<LayerNorm*>(&m)) y = ln->forward(x);
      else if (auto* rn = dynamic_cast<RMSNorm*>(&m)) y = rn->forward(x);
      else if (auto* gn = dynamic_cast<GroupNorm*>(&m)) y = gn->forward(x);
      else if (auto* cv = dynamic_cast<Conv2d*>(&m)) y = cv->forward(x);
      else if (auto* em = dynamic_cast<Embedding*>(&m)) y = em->forward(x);
      else fail("compile", "cannot infer the output of opaque module '", path(m), "' (", m.type_name(), ")");
    } catch (...) {
      CaptureHook::set_current(this);
      throw;
    }
    CaptureHook::set_current(this);
    scratch.finish({});
    return {y.shape(), y.dtype(), y.device()};
  }

  Module& root_;
  ops::Trace& trace_;
  const CompileBackend* device_;
  CaptureHook* previous_;
  std::unordered_map<const Module*, std::string> paths_;
  std::vector<Opaque> opaques_;
};

struct Converter {
  Graph g;
  std::unordered_map<int64_t, Ref> symbols;               // symbolic id -> buffer
  std::unordered_map<const Storage*, std::pair<int32_t, int64_t>> params;  // storage -> (index, base offset)
  std::unordered_map<const Storage*, int32_t> constants;

  Ref ref(const Tensor& t) {
    Ref r;
    if (!t.defined()) return r;
    r.shape = t.shape();
    r.strides = t.strides();
    r.dtype = t.dtype();
    if (t.is_symbolic()) {
      auto it = symbols.find(t.storage()->symbolic_id());
      check(it != symbols.end(), "compile", "a traced tensor of another trace was used");
      r.src = it->second.src;
      r.index = it->second.index;
      r.offset = t.offset();
      return r;
    }
    if (auto it = params.find(t.storage().get()); it != params.end()) {
      r.src = Ref::Src::param;
      r.index = it->second.first;
      r.offset = t.offset() - it->second.second;
      return r;
    }
    auto [it, fresh] = constants.emplace(t.storage().get(), int32_t(g.constants.size()));
    if (fresh) g.constants.push_back(t);
    r.src = Ref::Src::constant;
    r.index = it->second;
    r.offset = t.offset() - g.constants[size_t(it->second)].offset();
    return r;
  }
};

}  // namespace

Graph capture(Module& root, const ForwardFn& fwd, const std::vector<Tensor>& examples) {
  const Device device = graph_device(root, examples);
  ops::Graph og;
  std::vector<Opaque> opaques;
  std::vector<int64_t> input_ids(examples.size(), -1);
  {
    ops::Trace trace(/*record_pieces=*/true);  // mul_add as its chain: the pieces fuse (docs/compile.md)
    std::vector<Tensor> outs;
    try {
      Capturer cap(root, trace, find_compile_backend(device.kind));
      std::vector<Tensor> sym(examples.size());
      for (size_t i = 0; i < examples.size(); ++i) {
        if (!examples[i].defined()) continue;
        sym[i] = trace.input(examples[i].shape(), examples[i].dtype(), examples[i].device());
        input_ids[i] = sym[i].storage()->symbolic_id();
      }
      outs = fwd(root, sym);
      opaques = cap.opaques();
    } catch (...) {
      trace.finish({});
      throw;
    }
    og = trace.finish(std::move(outs));
  }

  Converter c;
  c.g.device = device;
  for (size_t i = 0; i < examples.size(); ++i) {
    c.g.input_defined.push_back(examples[i].defined());
    c.g.inputs.push_back(examples[i].defined()
                             ? BufferMeta{examples[i].shape(), examples[i].dtype(), examples[i].device()}
                             : BufferMeta{});
    if (input_ids[i] >= 0) {
      Ref r;
      r.src = Ref::Src::input;
      r.index = int32_t(i);
      c.symbols[input_ids[i]] = r;
    }
  }
  const auto named = root.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const Parameter& p = *named[i].second;
    if (!p.defined() || p.packed_form()) continue;
    c.params.emplace(p.dense().storage().get(), std::make_pair(int32_t(i), p.dense().offset()));
  }
  for (const ops::Graph::Node& on : og.nodes) {
    Node n;
    if (on.call.kind == ops::OpKind::count_) {
      const Opaque& o = opaques.at(size_t(on.call.attrs.i0));
      n.kind = Node::Kind::opaque;
      n.module_path = o.path;
      n.opaque = o.fn;
      n.quantized_linear = o.quantized_linear;
    } else {
      n.kind = Node::Kind::op;
      n.op = on.call.kind;
      n.attrs = on.call.attrs;
    }
    for (const Tensor& t : on.call.inputs) n.inputs.push_back(c.ref(t));
    n.out = {on.meta.shape, on.meta.dtype, on.meta.device};
    Ref self;
    self.src = Ref::Src::value;
    self.index = int32_t(c.g.nodes.size());
    c.symbols[on.id] = self;
    c.g.nodes.push_back(std::move(n));
  }
  for (const Tensor& t : og.outputs) {
    check(t.defined(), "compile", "a captured forward returned an undefined tensor");
    c.g.outputs.push_back(c.ref(t));
  }
  return std::move(c.g);
}

}  // namespace diffq::compile
