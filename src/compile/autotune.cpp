#include "compile/autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include "diffq/error.h"

namespace diffq::compile {

using clock_type = std::chrono::steady_clock;

namespace {

// When one run of the default takes longer than this, fewer rounds are timed.
constexpr double kSlowRunSeconds = 0.25;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

std::string autotune_node_key(const Node& n, const ops::OpCall& call) {
  std::ostringstream s;
  s.precision(17);
  const ops::Attrs& a = n.attrs;
  if (n.kind == Node::Kind::fused) s << "gemm+" << n.label() << ' ';  // the epilogue program is part of the key
  s << ops::op_name(n.op) << " attrs(" << a.i0 << ',' << a.i1 << ',' << a.f0 << ',' << a.f1 << ',' << a.flag << ','
    << dtype_name(a.dtype);
  for (int64_t v : a.ints) s << ',' << v;
  s << ')';
  for (const Tensor& t : call.inputs) {
    if (!t.defined()) {
      s << " none";
      continue;
    }
    s << ' ' << dtype_name(t.dtype()) << shape_str(t.shape()) << "/" << shape_str(t.strides());
  }
  s << " -> " << dtype_name(n.out.dtype) << shape_str(n.out.shape);
  return s.str();
}

Autotuner::Autotuner(const CompileOptions& o) : opt_(o), file_(autotune_cache_path(o.autotune_cache)) {}

KernelTuning Autotuner::time_candidates(const CompileBackend& device, const std::vector<KernelTuning>& cands,
                                        const std::function<void(Tensor&)>& kernel, const BufferMeta& meta,
                                        AutotuneStats& st) const {
  // A scratch output: the node's own buffer may be shared with others (memory plan), and the node
  // runs for real after its tuning is chosen.
  Tensor out = Tensor::empty(meta.shape, meta.dtype, meta.device);
  auto once = [&](size_t c) {
    const std::shared_ptr<void> scope = device.install(cands[c]);
    const auto t0 = clock_type::now();
    kernel(out);
    return seconds_since(t0);
  };
  const size_t n = cands.size();
  double first = 0;
  for (size_t c = 0; c < n; ++c) {  // warm-up (caches, scratch buffers of the kernels)
    const double t = once(c);
    if (c == 0) first = t;
  }
  int rounds = std::max(1, opt_.autotune_reps);
  if (first > kSlowRunSeconds) rounds = std::min(rounds, 3);
  std::vector<std::vector<double>> times(n);
  for (int r = 0; r < rounds; ++r)
    for (size_t j = 0; j < n; ++j) {  // interleaved, a different candidate first each round: drift hits all alike
      const size_t c = (j + size_t(r)) % n;
      times[c].push_back(once(c));
    }
  st.candidates += int64_t(n);
  size_t best = 0;
  std::vector<double> med(n);
  for (size_t c = 0; c < n; ++c) {
    med[c] = median(times[c]);
    if (med[c] < med[best]) best = c;
  }
  return med[best] < med[0] * (1.0 - opt_.autotune_margin) ? cands[best] : cands[0];
}

std::vector<Tensor> Autotuner::tune_and_run(CompiledGraph& g, const std::vector<Tensor>& inputs,
                                            const std::vector<Tensor>& params, Module* root, AutotuneStats& st) {
  check(g.backend != nullptr, "autotune", "the graph's device has no compile backend");
  const CompileBackend& device = *g.backend;
  auto t0 = clock_type::now();
  const std::string proc = opt_.autotune_processor.empty() ? device.processor_key() : opt_.autotune_processor;
  if (!loaded_ || proc != processor_) {
    table_ = load_autotune_cache(file_, proc, device);
    processor_ = proc;
    loaded_ = true;
  }
  st.seconds += seconds_since(t0);

  TuningTable fresh;
  g.tuning.assign(g.graph.nodes.size(), KernelTuning{});
  const CompiledGraph::OpHook hook = [&](size_t i, const ops::OpCall& call) {
    const Node& node = g.graph.nodes[i];
    std::vector<KernelTuning> cands = device.tuning_candidates(node, call);
    if (opt_.autotune_max_candidates > 0 && cands.size() > size_t(opt_.autotune_max_candidates))
      cands.resize(size_t(opt_.autotune_max_candidates));
    const bool fused = node.kind == Node::Kind::fused;
    if (cands.size() < 2 || (!fused && g.kernels[i] == nullptr)) return;
    ++st.nodes;
    const std::string key = autotune_node_key(node, call);
    KernelTuning choice;
    if (auto it = table_.find(key); it != table_.end()) {
      choice = it->second;
      ++st.cache_hits;
    } else {
      const auto t1 = clock_type::now();
      const auto run_node = [&](Tensor& out) {
        if (fused)
          device.run_fused(*node.program, call.inputs, out, nullptr);
        else
          g.kernels[i](call, out);
      };
      choice = time_candidates(device, cands, run_node, node.out, st);
      st.seconds += seconds_since(t1);
      ++st.tuned;
      table_[key] = fresh[key] = choice;
    }
    g.tuning[i] = choice;
    st.non_default += !choice.is_default();
  };
  std::vector<Tensor> out = g.run(inputs, params, root, hook);

  if (!fresh.empty()) {
    t0 = clock_type::now();
    try {
      save_autotune_cache(file_, processor_, fresh, device);
    } catch (const Error& e) {  // the choices still serve this process
      std::fprintf(stderr, "diffq autotune: the choices are not saved: %s\n", e.what());
    }
    st.seconds += seconds_since(t0);
  }
  return out;
}

}  // namespace diffq::compile
