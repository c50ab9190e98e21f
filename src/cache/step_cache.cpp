#include "cache/step_cache.h"

#include <cmath>

#include "cache/first_block_cache.h"
#include "cache/mag_cache.h"
#include "cache/taylorseer_cache.h"
#include "cache/teacache.h"
#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::cache {

StepCache::StepCache(CacheOptions opt, std::string model_name, int64_t num_blocks, std::string skipped_range,
                     std::string always_run)
    : opt_(std::move(opt)), model_name_(std::move(model_name)), num_blocks_(num_blocks),
      skipped_range_(std::move(skipped_range)), always_run_(std::move(always_run)) {}

void StepCache::reset(int64_t run_steps) {
  run_steps_ = run_steps;
  steps_.clear();
  calls_.clear();
  context_ = "cond";
}

void StepCache::record(bool computed) {
  steps_.push_back({model_name_, context_, calls_[context_]++, computed});
}

void StepCache::append_report(CacheReport& r) const {
  r.method = opt_.str();
  r.skipped_range = skipped_range_;
  r.always_run = always_run_;
  for (const auto& s : steps_) {
    r.steps.push_back(s);
    (s.computed ? r.computed : r.skipped) += 1;
  }
}

std::unique_ptr<StepCache> make_step_cache(const CacheOptions& opt, const std::string& model_name,
                                           const std::vector<std::string>& names, bool is_flux) {
  using M = CacheOptions::Method;
  const int64_t n = int64_t(names.size());
  switch (opt.method) {
    case M::none: return nullptr;
    case M::first_block:
      // Diffusers pops a head and a tail block: the model needs two blocks at least.
      check(n >= 2, "cache", "FirstBlockCache needs at least 2 transformer blocks, the model has ", n);
      return std::make_unique<FirstBlockCache>(opt, model_name, n, names[1] + ".." + names.back(), names[0]);
    case M::magcache:
      check(n >= 1, "cache", "MagCache needs at least 1 transformer block");
      return std::make_unique<MagCache>(opt, model_name, n, names[0] + ".." + names.back(), "");
    case M::teacache:
      check(is_flux, "cache",
            "TeaCache's published rescale polynomial is FLUX's (TeaCache4FLUX); this model is not a FLUX transformer");
      return std::make_unique<TeaCache>(opt, model_name, n, names[0] + ".." + names.back(), "");
    case M::taylorseer:
      // Diffusers' default identifiers (^transformer_blocks.*attn, ^single_transformer_blocks.*attn, ^blocks.*attn)
      // fullmatch FLUX's attn modules but none of Wan's (attn1 / attn2): there TaylorSeer hooks nothing.
      check(is_flux, "cache",
            "TaylorSeer: Diffusers' default cache_identifiers (^blocks.*attn, ...) match no module of "
            "WanTransformer3DModel (its attention modules are attn1/attn2), so Diffusers' TaylorSeer is a no-op "
            "on Wan; diffq refuses rather than pretend");
      return std::make_unique<TaylorSeerCache>(opt, model_name, n, names);
  }
  return nullptr;
}

double round_to(double v, DType dt) {
  return double(Tensor::full({1}, v, dt).to_f32_vector()[0]);
}

double abs_mean(const Tensor& a) {
  const std::vector<float> v = a.to(Device::cpu()).to_f32_vector();
  double s = 0;
  for (float f : v) s += std::fabs(double(f));
  return round_to(v.empty() ? 0.0 : s / double(v.size()), a.dtype());
}

double abs_diff_mean(const Tensor& a, const Tensor& b) { return abs_mean(ops::sub(a, b)); }

}  // namespace diffq::cache
