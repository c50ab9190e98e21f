// FlowMatchEulerDiscreteScheduler (Diffusers 0.42.1) and FluxPipeline's schedule helpers.
//
// Precision follows Diffusers exactly (the fixture tests compare bit for bit):
// - sigmas / timesteps handed in (FluxPipeline always passes sigmas = np.linspace(1, 1/N, N)) are
//   rounded to float32 first; the time shift then runs in float32 (NumPy keeps float32 arrays with
//   Python scalars, the scalars rounded to float32: e^mu, shift, shift - 1).
// - with neither given, the default np.linspace(sigma_max*1000, sigma_min*1000, N) / 1000 and its
//   shift run in float64 and are rounded to float32 afterwards.
// - timesteps = float32(sigmas * 1000); a terminal 0 (1 with invert_sigmas) is appended to sigmas.
// - step(): prev = sample_f32 + dt * v with dt = sigma_next - sigma in float32, cast to v's dtype.
//   For a bf16/f16 v torch's promotion makes dt * v a half-precision product: dt is rounded to v's
//   dtype, the product is rounded to v's dtype, and only the addition to the float32 sample is f32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "io/json_config.h"

namespace diffq {

struct FlowMatchEulerDiscreteConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
  bool invert_sigmas = false;
  std::optional<double> shift_terminal;
  bool use_karras_sigmas = false;
  bool use_exponential_sigmas = false;
  bool use_beta_sigmas = false;             // needs scipy's beta ppf: rejected by set_timesteps
  std::string time_shift_type = "exponential";  // or "linear"
  bool stochastic_sampling = false;          // rejected by step (needs a noise generator)

  // Missing or null keys take Diffusers' defaults; unknown keys are ignored.
  static FlowMatchEulerDiscreteConfig from_json(const io::JsonConfig& cfg);
  static FlowMatchEulerDiscreteConfig from_file(const std::filesystem::path& scheduler_config_json);
};

struct SetTimestepsOptions {
  std::optional<std::vector<double>> sigmas;     // rounded to float32 like np.astype(np.float32)
  std::optional<double> mu;                      // required with use_dynamic_shifting
  std::optional<std::vector<double>> timesteps;  // custom timesteps (used as given)
};

class FlowMatchEulerDiscreteScheduler {
 public:
  explicit FlowMatchEulerDiscreteScheduler(FlowMatchEulerDiscreteConfig config = {});

  const FlowMatchEulerDiscreteConfig& config() const { return config_; }
  double shift() const { return shift_; }
  void set_shift(double shift) { shift_ = shift; }
  float sigma_min() const { return sigma_min_; }
  float sigma_max() const { return sigma_max_; }

  // num_inference_steps may be omitted when sigmas or timesteps are given.
  void set_timesteps(std::optional<int64_t> num_inference_steps, const SetTimestepsOptions& opts = {});

  const std::vector<float>& sigmas() const { return sigmas_; }        // N + 1 (terminal value)
  const std::vector<float>& timesteps() const { return timesteps_; }  // N
  int64_t num_inference_steps() const { return num_inference_steps_; }

  std::optional<int64_t> step_index() const { return step_index_; }
  std::optional<int64_t> begin_index() const { return begin_index_; }
  void set_begin_index(int64_t begin_index = 0) { begin_index_ = begin_index; }
  // The position of `timestep` in timesteps() (the second match when it occurs twice).
  int64_t index_for_timestep(float timestep) const;

  // One Euler step; returns prev_sample in model_output's dtype (CPU tensors, any layout).
  Tensor step(const Tensor& model_output, float timestep, const Tensor& sample);

 private:
  FlowMatchEulerDiscreteConfig config_;
  double shift_;
  float sigma_min_ = 0, sigma_max_ = 1;
  std::vector<float> sigmas_, timesteps_;
  int64_t num_inference_steps_ = 0;
  std::optional<int64_t> step_index_, begin_index_;
};

// FluxPipeline's calculate_shift (all float64): mu = image_seq_len * m + b.
double calculate_shift(int64_t image_seq_len, int64_t base_seq_len = 256, int64_t max_seq_len = 4096,
                       double base_shift = 0.5, double max_shift = 1.15);

// numpy.linspace(start, stop, num) in float64 (i * step + start, the last value set to stop).
std::vector<double> np_linspace(double start, double stop, int64_t num);

// FluxPipeline's default sigmas: np.linspace(1.0, 1 / N, N).
std::vector<double> flux_default_sigmas(int64_t num_inference_steps);

}  // namespace diffq
