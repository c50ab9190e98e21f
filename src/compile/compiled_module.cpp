#include "compile/compiled_module.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "diffq/error.h"
#include "modules/module.h"

namespace diffq::compile {

std::vector<Tensor> dense_parameters(Module& m, const CompiledGraph* g) {
  std::vector<bool> read;
  if (g) {
    auto mark = [&](const Ref& r) {
      if (r.src != Ref::Src::param) return;
      if (size_t(r.index) >= read.size()) read.resize(size_t(r.index) + 1, false);
      read[size_t(r.index)] = true;
    };
    for (const Node& n : g->graph.nodes)
      for (const Ref& r : n.inputs) mark(r);
    for (const Ref& r : g->graph.outputs) mark(r);
  }
  std::vector<Tensor> out;
  size_t i = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const bool wanted = !g || (i < read.size() && read[i]);
    out.push_back(wanted && p->defined() && !p->packed_form() ? p->dense() : Tensor());
    ++i;
  }
  return out;
}

CompiledModule::CompiledModule(ForwardFn fwd, CompileOptions o) : fwd_(std::move(fwd)), opt_(apply_env(o)) {}

std::string CompiledModule::signature(Module& m, const std::vector<Tensor>& inputs) {
  std::ostringstream s;
  s << m.type_name() << '(';
  for (const Tensor& t : inputs) {
    if (!t.defined()) s << "none;";
    else s << shape_str(t.shape()) << dtype_name(t.dtype()) << '@' << t.device().str() << ';';
  }
  s << ')';
  for (const auto& [name, p] : m.named_parameters()) {
    s << name << ':' << shape_str(p->shape());
    if (!p->defined()) s << "unloaded";
    else if (p->is_quantized()) {
      const auto st = p->quantized().storage_tensors();
      s << p->quantized().scheme() << '@' << (st.empty() ? std::string("?") : st[0].device().str());
    } else if (p->is_packed()) {  // a dense weight packed for the device's GEMM: the graph is the same
      s << dtype_name(p->dtype()) << '@' << p->packed().storage_tensors().at(0).device().str();
    } else {
      s << dtype_name(p->dense().dtype()) << '@' << p->dense().device().str();
    }
    s << ';';
  }
  return s.str();
}

std::shared_ptr<const CompiledGraph> CompiledModule::graph_for(Module& m, const std::vector<Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(signature(m, inputs));
  return it == cache_.end() ? nullptr : it->second.graph;
}

CompileStats CompiledModule::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompileStats s = stats_;
  s.device_graphs = graphs_.stats();
  return s;
}

TuningTable CompiledModule::autotune_choices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuner_ ? tuner_->choices() : TuningTable{};
}

std::string CompiledModule::autotune_cache_file() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuner_ ? tuner_->cache_file().string() : std::string();
}

std::vector<Tensor> CompiledModule::run(Module& m, const std::vector<Tensor>& inputs) {
  const std::string sig = signature(m, inputs);
  if (opt_.mode == CompileMode::reduce_overhead) {
    for (const Tensor& t : inputs) {
      if (!t.defined()) continue;
      if (t.device().is_cpu()) break;  // on the CPU the mode is the default one: nothing to replay
      return graphs_.run(m, sig, inputs,
                         [&](const std::vector<Tensor>& in) { return run_signature(m, sig, in); });
    }
  }
  return run_signature(m, sig, inputs);
}

std::vector<Tensor> CompiledModule::run_signature(Module& m, const std::string& sig,
                                                  const std::vector<Tensor>& inputs) {
  std::shared_ptr<const CompiledGraph> g;
  bool eager = false;
  std::optional<std::vector<Tensor>> tuned_out;  // max-autotune: the first run is the tuning run
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(sig);
    if (it == cache_.end()) {
      const auto t0 = std::chrono::steady_clock::now();
      Entry e;
      std::optional<CompiledGraph> cg;
      try {
        cg = compile_graph(capture(m, fwd_, inputs), opt_);
        stats_.last_passes = cg->stats;
        stats_.last_arena_bytes = cg->plan.arena_bytes;
        stats_.last_unplanned_bytes = cg->plan.unplanned_bytes;
      } catch (const Error& err) {
        if (opt_.fullgraph) throw;
        e.reason = err.what();
        std::fprintf(stderr, "diffq compile: %s runs eagerly for this input signature: %s\n",
                     m.type_name().c_str(), err.what());
      }
      stats_.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Errors (a bad cache file) are not a fallback. Without a compile backend autotune declined (PassStats).
      if (cg && cg->backend && cg->backend->offers("autotune") && opt_.mode == CompileMode::max_autotune) {
        if (!tuner_) tuner_ = std::make_unique<Autotuner>(opt_);
        tuned_out = tuner_->tune_and_run(*cg, inputs, dense_parameters(m, &*cg), &m, stats_.autotune);
      }
      if (cg) e.graph = std::make_shared<const CompiledGraph>(std::move(*cg));
      ++stats_.captures;
      it = cache_.emplace(sig, std::move(e)).first;
    } else if (it->second.graph) {
      ++stats_.hits;
    }
    g = it->second.graph;
    if (!g) {
      eager = true;
      ++stats_.eager_fallbacks;
      stats_.last_fallback_reason = it->second.reason;
    }
  }
  if (eager) return fwd_(m, inputs);
  if (tuned_out) return std::move(*tuned_out);
  return g->run(inputs, dense_parameters(m, g.get()), &m);
}

CompileStats total_stats(const std::vector<const CompiledModule*>& mods) {
  CompileStats t;
  for (const CompiledModule* m : mods) {
    const CompileStats s = m->stats();
    t.captures += s.captures;
    t.hits += s.hits;
    t.eager_fallbacks += s.eager_fallbacks;
    t.compile_seconds += s.compile_seconds;
    t.last_passes.opaque_nodes += s.last_passes.opaque_nodes;
    t.last_passes.fused_dequant += s.last_passes.fused_dequant;
    for (const std::string& p : s.last_passes.declined)
      if (std::find(t.last_passes.declined.begin(), t.last_passes.declined.end(), p) == t.last_passes.declined.end())
        t.last_passes.declined.push_back(p);
    if (t.last_passes.declined_why.empty()) t.last_passes.declined_why = s.last_passes.declined_why;
    t.autotune.nodes += s.autotune.nodes;
    t.autotune.tuned += s.autotune.tuned;
    t.autotune.candidates += s.autotune.candidates;
    t.autotune.cache_hits += s.autotune.cache_hits;
    t.autotune.non_default += s.autotune.non_default;
    t.autotune.seconds += s.autotune.seconds;
    t.device_graphs.warmups += s.device_graphs.warmups;
    t.device_graphs.captures += s.device_graphs.captures;
    t.device_graphs.replays += s.device_graphs.replays;
    t.device_graphs.refused += s.device_graphs.refused;
    t.device_graphs.graphs += s.device_graphs.graphs;
    if (!s.device_graphs.last_refusal.empty()) t.device_graphs.last_refusal = s.device_graphs.last_refusal;
  }
  return t;
}

}  // namespace diffq::compile
