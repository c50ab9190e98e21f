#include "backend/cpu/compile/autotune_candidates.h"

#include <algorithm>
#include <set>
#include <utility>

#include "backend/cpu/gemm.h"

namespace diffq::backend::cpu {

namespace {

// GEMMs under kGemmParallelMacs run on the calling thread whatever the split: nothing to
// tune. "none" (one single-threaded call) is a candidate only below this size: above, it cannot win.
constexpr double kNoneMacs = double(1 << 26);

std::vector<Tuning> gemm_candidates(int64_t m, int64_t n, int64_t k, int threads) {
  const double macs = double(m) * double(n) * double(k);
  if (gemm_split_plan(m, n, k, threads, Tuning{}).parts <= 1) return {};
  // Candidates that split C the same way as one already listed are dropped.
  std::vector<Tuning> out{Tuning{}};
  std::set<GemmSplitPlan> seen{gemm_split_plan(m, n, k, threads, Tuning{})};
  for (GemmSplit s : {GemmSplit::rows, GemmSplit::cols})
    for (int per_thread : {1, 2, 4}) {
      Tuning t;
      t.gemm_split = s;
      t.gemm_parts_per_thread = per_thread;
      if (seen.insert(gemm_split_plan(m, n, k, threads, t)).second) out.push_back(t);
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

std::vector<Tuning> autotune_candidates(const compile::Node& n, const ops::OpCall& call, int threads) {
  if (!n.out.device.is_cpu()) return {};
  const auto& in = call.inputs;
  if (n.kind == compile::Node::Kind::fused && n.program && n.program->gemm) {  // a linear with its epilogue
    const compile::GemmPrologue& gp = *n.program->gemm;
    if (!gp.module.empty()) return {};  // a quantized GEMM: its scheme's kernel, not tuned (as opaque ones)
    const Tensor &x = in[size_t(gp.x)], &w = in[size_t(gp.w)];
    const int64_t k = x.size(-1);
    return gemm_candidates(k > 0 ? x.numel() / k : 0, w.size(0), k, threads);
  }
  if (n.kind != compile::Node::Kind::op) return {};
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

}  // namespace diffq::backend::cpu
