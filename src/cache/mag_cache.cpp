#include "cache/mag_cache.h"

#include <cmath>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::cache {

const std::vector<float>& flux_mag_ratios() {
  static const std::vector<float> r = {
      1.0f,     1.21094f, 1.11719f, 1.07812f, 1.0625f,  1.03906f, 1.03125f, 1.03906f, 1.02344f, 1.03125f,
      1.02344f, 0.98047f, 1.01562f, 1.00781f, 1.0f,     1.00781f, 1.0f,     1.00781f, 1.0f,     1.0f,
      0.99609f, 0.99609f, 0.98047f, 0.98828f, 0.96484f, 0.95703f, 0.93359f, 0.89062f};
  return r;
}

std::vector<float> nearest_interp(const std::vector<float>& src, int64_t n) {
  check(!src.empty() && n >= 1, "cache", "nearest_interp needs a non-empty source and a positive length");
  if (n == 1) return {src.back()};
  // scale = (src_length - 1) / (target_length - 1) in Python float; grid float32 * scale in float32;
  // torch.round rounds half to even (std::nearbyint under the default rounding mode).
  const float scale = float(double(src.size() - 1) / double(n - 1));
  std::vector<float> out;
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(i) * scale;
    out.push_back(src[size_t(std::nearbyint(v))]);
  }
  return out;
}

void MagCache::reset(int64_t run_steps) {
  StepCache::reset(run_steps);
  states_.reset();
  num_inference_steps_ = opt_.num_inference_steps > 0 ? opt_.num_inference_steps : run_steps;
  check(num_inference_steps_ > 0, "cache", "MagCache needs num_inference_steps");
  if (!opt_.calibrate) {
    const std::vector<float>& src = opt_.mag_ratios.empty() ? flux_mag_ratios() : opt_.mag_ratios;
    ratios_ = int64_t(src.size()) == num_inference_steps_ ? src : nearest_interp(src, num_inference_steps_);
  }
}

bool MagCache::decide(State& s) const {
  if (opt_.calibrate) return true;
  const int64_t step = s.step_index;
  const float scale = step >= int64_t(ratios_.size()) ? 1.0f : ratios_[size_t(step)];
  const int64_t retention_step = int64_t(opt_.retention_ratio * double(num_inference_steps_) + 0.5);
  if (step < retention_step) return true;
  s.accumulated_ratio = s.accumulated_ratio * scale;
  s.accumulated_steps += 1;
  s.accumulated_err = s.accumulated_err + std::fabs(1.0f - s.accumulated_ratio);
  // accumulated_err (float32 tensor) <= threshold: compared in float32.
  if (s.previous_residual.defined() && s.accumulated_err <= float(opt_.effective_threshold()) &&
      s.accumulated_steps <= opt_.max_skip_steps)
    return false;
  s.accumulated_ratio = 1.0f;
  s.accumulated_steps = 0;
  s.accumulated_err = 0.0f;
  return true;
}

void MagCache::advance_step(State& s) {
  s.step_index += 1;
  if (s.step_index >= num_inference_steps_) {
    if (opt_.calibrate && context_ == "cond") calibration_ = s.calibration_ratios;
    s.step_index = 0;
    s.accumulated_ratio = 1.0f;
    s.accumulated_steps = 0;
    s.accumulated_err = 0.0f;
    s.previous_residual = Tensor();
    s.calibration_ratios.clear();
  }
}

Streams MagCache::run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput&) {
  State& s = states_.get(context_);
  const bool compute = decide(s);
  record(compute);
  if (!compute) {
    Streams out{ops::add(in.x, s.previous_residual), in.e};  // head: hidden_states + previous_residual
    advance_step(s);                                          // the tail hook advances the step
    return out;
  }
  const Streams out = run(0, num_blocks_, in);
  const Tensor residual = ops::sub(out.x, in.x);  // tail output - head_block_input
  if (opt_.calibrate) {
    double ratio = 1.0;
    if (s.previous_residual.defined()) {
      // mean over tokens of ||r||_2 / (||r_prev||_2 + 1e-8), norms over the last dim in float32
      const std::vector<float> a = residual.to(DType::f32).to(Device::cpu()).to_f32_vector();
      const std::vector<float> b = s.previous_residual.to(DType::f32).to(Device::cpu()).to_f32_vector();
      const int64_t D = residual.size(residual.dim() - 1), rows = int64_t(a.size()) / D;
      double sum = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double na = 0, nb = 0;
        for (int64_t d = 0; d < D; ++d) {
          na += double(a[size_t(r * D + d)]) * a[size_t(r * D + d)];
          nb += double(b[size_t(r * D + d)]) * b[size_t(r * D + d)];
        }
        sum += double(float(std::sqrt(na)) / (float(std::sqrt(nb)) + 1e-8f));
      }
      ratio = double(float(sum / double(rows)));
    }
    s.calibration_ratios.push_back(ratio);
  }
  s.previous_residual = residual;
  advance_step(s);
  return out;
}

void MagCache::append_report(CacheReport& r) const {
  StepCache::append_report(r);
  if (opt_.calibrate) {
    // The completed calibration, or the partial one of the cond context when the run was shorter.
    std::vector<double> c = calibration_;
    if (c.empty()) {
      auto& self = const_cast<MagCache&>(*this);
      c = self.states_.get("cond").calibration_ratios;
    }
    r.calibration_ratios = c;
  }
}

}  // namespace diffq::cache
