#include "cache/taylorseer_cache.h"

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::cache {

TaylorSeerCache::TaylorSeerCache(const CacheOptions& opt, const std::string& model_name, int64_t num_blocks,
                                 const std::vector<std::string>& names)
    : StepCache(opt, model_name, num_blocks, names.front() + ".attn.." + names.back() + ".attn (predicted)",
                "everything but the attention modules") {}

void TaylorSeerCache::reset(int64_t run_steps) {
  StepCache::reset(run_steps);
  states_.clear();
  steps_seen_.clear();
}

bool TaylorSeerCache::should_compute(int64_t step, const CacheOptions& o) {
  const bool is_warmup_phase = step < o.disable_cache_before_step;
  int64_t m = (step - o.disable_cache_before_step - 1) % o.cache_interval;  // Python's % (non-negative)
  if (m < 0) m += o.cache_interval;
  const bool is_compute_interval = m == 0;
  const bool is_cooldown_phase = o.disable_cache_after_step && step >= *o.disable_cache_after_step;
  return is_warmup_phase || is_compute_interval || is_cooldown_phase;
}

Streams TaylorSeerCache::run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput&) {
  // Every hooked module advances once per call, so the call's decision is the rule at the context's step.
  const int64_t step = steps_seen_[context_]++;
  record(should_compute(step, opt_));
  return run(0, num_blocks_, in);
}

std::function<std::vector<Tensor>(int64_t, const std::function<std::vector<Tensor>()>&)>
TaylorSeerCache::attention_hook() {
  return [this](int64_t module, const std::function<std::vector<Tensor>()>& compute) {
    return run_module(module, compute);
  };
}

std::vector<Tensor> TaylorSeerCache::run_module(int64_t module, const std::function<std::vector<Tensor>()>& compute) {
  State& s = states_[module].get(context_);
  s.current_step += 1;
  const DType fdt = opt_.taylor_factors_bf16 ? DType::bf16 : DType::f32;
  if (should_compute(s.current_step, opt_)) {
    std::vector<Tensor> outputs = compute();
    s.module_dtypes.clear();
    std::vector<std::vector<Tensor>> factors(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& features = outputs[i];
      s.module_dtypes.push_back(features.dtype());
      std::vector<Tensor> nf{features};  // new_factors[0] = features
      if (s.updated) {
        const int64_t delta_step = s.current_step - s.last_update_step;
        check(delta_step != 0, "cache", "TaylorSeer: delta step cannot be zero");
        const std::vector<Tensor> prev = i < s.taylor_factors.size() ? s.taylor_factors[i] : std::vector<Tensor>{};
        for (int64_t j = 0; j < opt_.max_order; ++j) {
          if (size_t(j) >= prev.size() || prev[size_t(j)].shape() != nf[size_t(j)].shape()) break;
          const Tensor d = ops::sub(nf[size_t(j)], prev[size_t(j)].to(features.dtype()));
          // (new - prev) / delta_step: a true division in the features' dtype
          nf.push_back(ops::div(d, Tensor::full(d.shape(), double(delta_step), d.dtype(), d.device())));
        }
      }
      for (auto& f : nf) factors[i].push_back(f.to(fdt));
    }
    s.taylor_factors = std::move(factors);
    s.updated = true;
    s.last_update_step = s.current_step;
    return outputs;
  }
  check(s.updated && !s.taylor_factors.empty(), "cache", "TaylorSeer: cannot predict without a prior update");
  const int64_t step_offset = s.current_step - s.last_update_step;
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < s.taylor_factors.size(); ++i) {
    const DType odt = s.module_dtypes[i];
    const auto& f = s.taylor_factors[i];
    Tensor out;  // zeros + sum_k factor_k * offset^k / k!, summed in order
    double fact = 1.0, power = 1.0;
    for (size_t k = 0; k < s.taylor_factors[0].size() && k < f.size(); ++k) {
      if (k > 0) {
        fact *= double(k);
        power *= double(step_offset);
      }
      const Tensor term = ops::mul_scalar(f[k].to(odt), power / fact);
      out = out.defined() ? ops::add(out, term) : term;
    }
    outputs.push_back(out);
  }
  return outputs;
}

}  // namespace diffq::cache
