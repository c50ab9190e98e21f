// Step caching (Diffusers' hooks/first_block_cache.py, taylorseer_cache.py, mag_cache.py; TeaCache4FLUX):
// skip transformer work between similar denoising steps, with Diffusers' decision rules so that the
// same settings skip the same steps on the same pipeline and seed.
//
//   pipe->enable_cache(diffq::parse_cache_spec("fbc:0.08"));      // FirstBlockCacheConfig(threshold=0.08)
//   auto r = pipe->generate(p);                                   // r.cache: steps computed vs skipped
//
// Spec strings (the CLI's --cache):
//   fbc[:THRESHOLD]                     FirstBlockCacheConfig(threshold=0.05)
//   taylorseer[:interval=5,order=1,before=3,after=N,dtype=bf16|f32]   TaylorSeerCacheConfig
//   magcache[:THRESHOLD][,max_skip=3,retention=0.2,steps=N,calibrate]  MagCacheConfig with FLUX_MAG_RATIOS
//   teacache[:THRESHOLD]                TeaCache4FLUX (rel_l1_thresh, default 0.4; its published polynomial)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace diffq {

struct CacheOptions {
  enum class Method { none, first_block, taylorseer, magcache, teacache };
  Method method = Method::none;
  // FirstBlockCache: relative L1 of the first block's residual (default 0.05); MagCache: accumulated
  // error (0.06); TeaCache: accumulated rescaled relative L1 (0.4). Negative = the method's default.
  double threshold = -1.0;
  // TaylorSeerCacheConfig
  int64_t cache_interval = 5;
  int64_t disable_cache_before_step = 3;
  std::optional<int64_t> disable_cache_after_step;
  int64_t max_order = 1;
  bool taylor_factors_bf16 = true;  // taylor_factors_dtype: torch.bfloat16 (Diffusers' default) or float32
  // MagCacheConfig
  int64_t max_skip_steps = 3;
  double retention_ratio = 0.2;
  // Diffusers' num_inference_steps (default 28 there): 0 = the run's step count (what a user means).
  int64_t num_inference_steps = 0;
  std::vector<float> mag_ratios;  // empty = Diffusers' FLUX_MAG_RATIOS (28 values, nearest-interpolated)
  bool calibrate = false;         // compute every step and report the ratios (CacheReport::calibration_ratios)

  double effective_threshold() const;
  std::string str() const;  // the spec as parse_cache_spec reads it back
};

// Parses a --cache spec (see the top of this file); "" or "none" -> Method::none. Errors name the field.
CacheOptions parse_cache_spec(const std::string& spec);

// What a run's cache did, per transformer and per cache context ("cond", "uncond").
struct CacheReport {
  std::string method;        // "fbc:0.08", ... ("" when no cache)
  std::string skipped_range; // the blocks a skipped step does not run, e.g. "transformer_blocks.1..single_transformer_blocks.37"
  std::string always_run;    // what still runs on a skipped step, e.g. "transformer_blocks.0"
  std::string note;          // e.g. how compile was adapted
  struct Step {
    std::string model;    // "transformer" / "transformer_2"
    std::string context;  // "cond" / "uncond"
    int64_t index = 0;    // call index within (model, context)
    bool computed = true;
  };
  std::vector<Step> steps;
  int64_t computed = 0, skipped = 0;
  std::vector<double> calibration_ratios;  // MagCache calibrate: one per step of the "cond" context
};

}  // namespace diffq
