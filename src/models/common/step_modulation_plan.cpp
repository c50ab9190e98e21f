#include "models/common/step_modulation_plan.h"

#include <algorithm>

#include "ops/ops.h"

namespace diffq::models {

void StepModulationPlan::plan(std::vector<Tensor> timesteps) {
  std::lock_guard<std::mutex> lock(mu_);
  windows_.clear();
  step_values_.clear();
  for (const Tensor& t : timesteps) step_values_.push_back(t.to_f32_vector());
  steps_ = std::move(timesteps);
}

void StepModulationPlan::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  windows_.clear();
  steps_.clear();
  step_values_.clear();
}

bool StepModulationPlan::active() const { return !steps_.empty(); }

int64_t StepModulationPlan::step_of(const Tensor& timestep) const {
  const std::vector<float> v = timestep.to_f32_vector();
  for (size_t j = 0; j < step_values_.size(); ++j)
    if (step_values_[j] == v && steps_[j].shape() == timestep.shape() && steps_[j].dtype() == timestep.dtype() &&
        steps_[j].device() == timestep.device())
      return int64_t(j);
  return -1;
}

Tensor StepModulationPlan::temb(const Tensor& timestep, const std::vector<float>& cond,
                                const std::function<Tensor(const Tensor& timestep)>& embed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (steps_.empty() || !timestep.defined() || timestep.is_symbolic() || timestep.dim() != 1) return {};
  const int64_t j = step_of(timestep);
  if (j < 0) return {};
  const int64_t B = std::max<int64_t>(1, timestep.size(0));
  const int64_t W = std::max<int64_t>(1, kWindowRows / B), first = j / W * W;
  auto it = std::find_if(windows_.begin(), windows_.end(), [&](const Window& w) { return w.cond == cond; });
  if (it == windows_.end()) it = windows_.insert(windows_.end(), Window{cond, -1, {}, {}});
  if (it->first != first || !it->stacked.defined()) {
    std::vector<Tensor> parts;
    for (int64_t k = first; k < std::min<int64_t>(first + W, int64_t(steps_.size())); ++k)
      parts.push_back(embed(steps_[size_t(k)]));  // [B, D] each, as the step's own call computes it
    it->first = first;
    it->outputs.clear();
    it->stacked = Tensor();  // (the old window's memory before the new one's)
    it->stacked = parts.size() == 1 ? parts[0] : ops::concat(parts, 0);  // [W * B, D]
  }
  return it->stacked.slice(0, (j - first) * B, (j - first + 1) * B);  // [B, D]
}

Tensor StepModulationPlan::rows(const void* owner, const Tensor& temb,
                                const std::function<Tensor(const Tensor& stacked)>& compute) {
  std::lock_guard<std::mutex> lock(mu_);
  if (windows_.empty() || !temb.defined() || temb.is_symbolic() || temb.dim() != 2) return {};
  for (Window& w : windows_) {
    const Tensor& s = w.stacked;
    if (!s.defined() || s.storage() != temb.storage() || s.strides() != temb.strides() || s.size(1) != temb.size(1))
      continue;
    const int64_t d = temb.offset() - s.offset(), row = s.strides()[0];
    if (row <= 0 || d < 0 || d % row != 0 || d / row + temb.size(0) > s.size(0)) continue;
    auto out = w.outputs.find(owner);
    if (out == w.outputs.end()) out = w.outputs.emplace(owner, compute(s)).first;  // [W * B, n * D]
    return out->second.slice(0, d / row, d / row + temb.size(0));
  }
  return {};
}

}  // namespace diffq::models
