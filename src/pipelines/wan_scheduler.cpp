#include "pipelines/wan_scheduler.h"

#include "diffq/error.h"

namespace diffq {

std::unique_ptr<WanScheduler> WanScheduler::from_component(const io::Component& c) {
  if (c.class_name == "UniPCMultistepScheduler")
    return std::make_unique<WanScheduler>(UniPCMultistepConfig::from_json(c.config));
  if (c.class_name == "FlowMatchEulerDiscreteScheduler") {
    auto cfg = FlowMatchEulerDiscreteConfig::from_json(c.config);
    check(!cfg.use_dynamic_shifting, "wan_pipeline", c.config_path.string(),
          ": use_dynamic_shifting needs a mu, which WanPipeline never passes (set it to false)");
    return std::make_unique<WanScheduler>(cfg);
  }
  fail("wan_pipeline", c.dir.string(), ": scheduler is a ", c.class_name,
       "; WanPipeline runs UniPCMultistepScheduler or FlowMatchEulerDiscreteScheduler");
}

WanScheduler::WanScheduler(UniPCMultistepConfig c) : unipc_(std::make_unique<UniPCMultistepScheduler>(std::move(c))) {}
WanScheduler::WanScheduler(FlowMatchEulerDiscreteConfig c)
    : euler_(std::make_unique<FlowMatchEulerDiscreteScheduler>(std::move(c))) {}

void WanScheduler::set_timesteps(int64_t n) {
  timesteps_.clear();
  if (unipc_) {
    unipc_->set_timesteps(n);
    for (int64_t t : unipc_->timesteps()) timesteps_.push_back(double(t));
  } else {
    euler_->set_timesteps(n);
    euler_->set_begin_index(0);
    for (float t : euler_->timesteps()) timesteps_.push_back(double(t));
  }
}

int64_t WanScheduler::num_train_timesteps() const {
  return unipc_ ? unipc_->config().num_train_timesteps : euler_->config().num_train_timesteps;
}

Tensor WanScheduler::step(const Tensor& model_output, double t, const Tensor& sample) {
  if (unipc_) return unipc_->step(model_output, int64_t(t), sample);
  return euler_->step(model_output, float(t), sample);
}

std::string WanScheduler::class_name() const {
  return unipc_ ? "UniPCMultistepScheduler" : "FlowMatchEulerDiscreteScheduler";
}

}  // namespace diffq
