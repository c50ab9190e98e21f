// The scheduler of a WanPipeline folder: UniPCMultistepScheduler (the released Wan checkpoints) or
// FlowMatchEulerDiscreteScheduler (Diffusers' own tiny Wan tests), behind the three calls the pipeline
// makes. Timesteps keep their type's values: UniPC's are int64, FlowMatchEuler's float32; `timestep_dtype`
// says which, since the transformer receives them as a tensor of that dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "diffq/tensor.h"
#include "io/diffusers_folder.h"
#include "schedulers/flow_match_euler.h"
#include "schedulers/unipc_multistep.h"

namespace diffq {

class WanScheduler {
 public:
  // From the folder's scheduler component (class named in model_index.json); other classes: an error.
  static std::unique_ptr<WanScheduler> from_component(const io::Component& c);
  explicit WanScheduler(UniPCMultistepConfig c);
  explicit WanScheduler(FlowMatchEulerDiscreteConfig c);

  void set_timesteps(int64_t num_inference_steps);
  const std::vector<double>& timesteps() const { return timesteps_; }
  DType timestep_dtype() const { return unipc_ ? DType::i64 : DType::f32; }
  int64_t num_train_timesteps() const;
  // prev_sample in sample's dtype (float32 latents in WanPipeline).
  Tensor step(const Tensor& model_output, double timestep, const Tensor& sample);
  std::string class_name() const;

 private:
  std::unique_ptr<UniPCMultistepScheduler> unipc_;
  std::unique_ptr<FlowMatchEulerDiscreteScheduler> euler_;
  std::vector<double> timesteps_;
};

}  // namespace diffq
