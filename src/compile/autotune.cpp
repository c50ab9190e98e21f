#include "compile/autotune.h"

#include <functional>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "backend/cpu/gemm.h"
#include "compile/fused_kernel.h"
#include "diffq/error.h"
#include "diffq/runtime.h"

namespace diffq::compile {

using backend::cpu::GemmSplit;
using backend::cpu::ScopedTuning;
using backend::cpu::Tuning;
using clock_type = std::chrono::steady_clock;

namespace {

// GEMMs under backend::cpu::kGemmParallelMacs run on the calling thread whatever the split: nothing to
// tune. "none" (one single-threaded call) is a candidate only below this size: above, it cannot win.
constexpr double kNoneMacs = double(1 << 26);
// When one run of the default takes longer than this, fewer rounds are timed.
constexpr double kSlowRunSeconds = 0.25;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<Tuning> gemm_candidates(int64_t m, int64_t n, int64_t k, int threads) {
  const double macs = double(m) * double(n) * double(k);
  if (backend::cpu::gemm_split_plan(m, n, k, threads, Tuning{}).parts <= 1) return {};
  // Candidates that split C the same way as one already listed are dropped.
  std::vector<Tuning> out{Tuning{}};
  std::set<backend::cpu::GemmSplitPlan> seen{backend::cpu::gemm_split_plan(m, n, k, threads, Tuning{})};
  for (GemmSplit s : {GemmSplit::rows, GemmSplit::cols})
    for (int per_thread : {1, 2, 4}) {
      Tuning t;
      t.gemm_split = s;
      t.gemm_parts_per_thread = per_thread;
      if (seen.insert(backend::cpu::gemm_split_plan(m, n, k, threads, t)).second) out.push_back(t);
    }
  if (macs < kNoneMacs) {
    Tuning t;
    t.gemm_split = GemmSplit::none;
    out.push_back(t);
  }
  return out;
}

std::vector<Tuning> attention_candidates(int64_t sq, int64_t sk) {
  const Tuning def;
  std::vector<Tuning> out{def};
  std::set<std::pair<int64_t, int64_t>> seen{{std::min(def.attn_bq, sq), std::min(def.attn_bk, sk)}};
  // Around the flash kernel's defaults (48 x 256): bq is rounded up to 6 rows, bk to 16 keys.
  for (int64_t bq : {24, 48, 96, 192})
    for (int64_t bk : {128, 256, 512, 1024})
      if (seen.insert({std::min(bq, sq), std::min(bk, sk)}).second) {
        Tuning t;
        t.attn_bq = bq;
        t.attn_bk = bk;
        out.push_back(t);
      }
  return out;
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

std::vector<Tuning> autotune_candidates(const Node& n, const ops::OpCall& call, int threads) {
  if (!n.out.device.is_cpu()) return {};
  const auto& in = call.inputs;
  if (n.kind == Node::Kind::fused && n.program && n.program->gemm) {  // a linear with its epilogue
    const GemmPrologue& gp = *n.program->gemm;
    if (!gp.module.empty()) return {};  // a quantized GEMM: its scheme's kernel, not tuned (as opaque ones)
    const Tensor &x = in[size_t(gp.x)], &w = in[size_t(gp.w)];
    const int64_t k = x.size(-1);
    return gemm_candidates(k > 0 ? x.numel() / k : 0, w.size(0), k, threads);
  }
  if (n.kind != Node::Kind::op) return {};
  switch (n.op) {
    case ops::OpKind::linear: {
      const int64_t k = in[0].size(-1);
      return gemm_candidates(k > 0 ? in[0].numel() / k : 0, in[1].size(0), k, threads);
    }
    case ops::OpKind::matmul:
      return gemm_candidates(in[0].size(-2), in[1].size(-1), in[0].size(-1), threads);
    case ops::OpKind::sdpa: {
      auto c = attention_candidates(in[0].size(2), in[1].size(2));
      return c.size() > 1 ? c : std::vector<Tuning>{};
    }
    default: return {};
  }
}

Autotuner::Autotuner(const CompileOptions& o) : opt_(o), file_(autotune_cache_path(o.autotune_cache)) {}

Tuning Autotuner::time_candidates(const std::vector<Tuning>& cands, const std::function<void(Tensor&)>& kernel,
                                  const BufferMeta& meta, AutotuneStats& st) const {
  // A scratch output: the node's own buffer may be shared with others (memory plan), and the node
  // runs for real after its tuning is chosen.
  Tensor out = Tensor::empty(meta.shape, meta.dtype, meta.device);
  auto once = [&](size_t c) {
    ScopedTuning scope(cands[c]);
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
  auto t0 = clock_type::now();
  const std::string proc = opt_.autotune_processor.empty() ? processor_key() : opt_.autotune_processor;
  if (!loaded_ || proc != processor_) {
    table_ = load_autotune_cache(file_, proc);
    processor_ = proc;
    loaded_ = true;
  }
  st.seconds += seconds_since(t0);

  TuningTable fresh;
  g.tuning.assign(g.graph.nodes.size(), Tuning{});
  const int threads = num_threads();
  const CompiledGraph::OpHook hook = [&](size_t i, const ops::OpCall& call) {
    const Node& node = g.graph.nodes[i];
    std::vector<Tuning> cands = autotune_candidates(node, call, threads);
    if (opt_.autotune_max_candidates > 0 && cands.size() > size_t(opt_.autotune_max_candidates))
      cands.resize(size_t(opt_.autotune_max_candidates));
    const bool fused = node.kind == Node::Kind::fused;
    if (cands.size() < 2 || (!fused && g.kernels[i] == nullptr)) return;
    ++st.nodes;
    const std::string key = autotune_node_key(node, call);
    Tuning choice;
    if (auto it = table_.find(key); it != table_.end()) {
      choice = it->second;
      ++st.cache_hits;
    } else {
      const auto t1 = clock_type::now();
      const auto run_node = [&](Tensor& out) {
        if (fused)
          run_fused(*node.program, call.inputs, out);
        else
          g.kernels[i](call, out);
      };
      choice = time_candidates(cands, run_node, node.out, st);
      st.seconds += seconds_since(t1);
      ++st.tuned;
      table_[key] = fresh[key] = choice;
    }
    g.tuning[i] = choice;
    st.non_default += choice != Tuning{};
  };
  std::vector<Tensor> out = g.run(inputs, params, root, hook);

  if (!fresh.empty()) {
    t0 = clock_type::now();
    try {
      save_autotune_cache(file_, processor_, fresh);
    } catch (const Error& e) {  // the choices still serve this process
      std::fprintf(stderr, "diffq autotune: the choices are not saved: %s\n", e.what());
    }
    st.seconds += seconds_since(t0);
  }
  return out;
}

}  // namespace diffq::compile
