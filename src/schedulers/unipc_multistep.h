// UniPCMultistepScheduler (Diffusers 0.42.1), the flow-matching path WanPipeline uses
// (prediction_type "flow_prediction", use_flow_sigmas true, flow_shift 3.0 / 5.0).
//
// Precision follows Diffusers + torch 2.15 on the CPU (tests/fixtures/unipc/ compares bit for bit):
// - set_timesteps: the flow sigmas linspace(1, 1/T, N+1)[:-1], the shift (or exp(mu) time shift,
//   shift_terminal stretch) and the "sigma_0 == 1 -> 1 - 1e-6" nudge run in float64 (NumPy); sigmas are
//   then rounded to float32 and timesteps = int64(float64 sigma * T) (truncation).
// - step(): every scalar (alpha = 1 - sigma, lambda = log alpha - log sigma, h, expm1(-h), the B(h)
//   coefficients, the 2x2 solve of the corrector) is a float32 0-dim tensor op in torch, done here in
//   float32 one op at a time. torch.log is MKL's vsLn (high-accuracy mode, < 1 ulp but NOT correctly
//   rounded: ~7% of float inputs differ by 1 ulp from log rounded correctly); diffq's lambdas use the
//   correctly rounded log, so a step may differ from Diffusers by ~1e-7 relative. set_lambdas() takes
//   another platform's lambdas (the tests feed torch's) and then every step of orders 1-2 is bit-exact
//   (solver_order 3: within 2e-7 relative; its 3x3 MKL solve / K=2 einsum op order is not reproduced).
//   expm1 is SLEEF's expm1f_u10 (torch's AVX2/AVX-512 kernels) only approximately: diffq rounds the
//   float64 expm1 (they differ on ~0.05% of inputs).
// - torch.linalg.solve (MKL sgesv) for the order-2 corrector: LU with partial pivoting, forward
//   substitution without FMA, back substitution by multiplying with the pivot's reciprocal.
// - elementwise ops keep torch's dtypes: a float32 0-dim scalar times a bf16/f16 tensor is rounded to
//   that dtype first (scalar * tensor) but not when it divides (tensor / scalar); tensor-tensor ops
//   promote (bf16 with float32 -> float32) and each op rounds once to its result dtype. With Wan's bf16
//   noise_pred and float32 latents, x0 = latents - sigma * v is float32 from there on. prev_sample has
//   the sample's dtype.
// Not implemented (set_timesteps/step reject them naming the field): the beta-schedule (non-flow) path,
// karras / exponential / beta sigmas, thresholding, solver_p.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "io/json_config.h"

namespace diffq {

struct UniPCMultistepConfig {
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  std::string beta_schedule = "linear";   // unused by the flow path
  bool has_trained_betas = false;         // trained_betas given (non-flow only; rejected)
  int64_t solver_order = 2;
  std::string prediction_type = "epsilon";  // the flow path needs "flow_prediction"
  bool thresholding = false;               // rejected when true
  double dynamic_thresholding_ratio = 0.995;
  double sample_max_value = 1.0;
  bool predict_x0 = true;
  std::string solver_type = "bh2";         // "midpoint" / "heun" / "logrho" become "bh2" (as Diffusers)
  bool lower_order_final = true;
  std::vector<int64_t> disable_corrector;
  bool use_karras_sigmas = false;
  bool use_exponential_sigmas = false;
  bool use_beta_sigmas = false;
  bool use_flow_sigmas = false;
  double flow_shift = 1.0;
  std::string timestep_spacing = "linspace";  // unused by the flow path
  int64_t steps_offset = 0;
  std::string final_sigmas_type = "zero";  // or "sigma_min"
  bool rescale_betas_zero_snr = false;
  bool use_dynamic_shifting = false;
  std::string time_shift_type = "exponential";
  std::optional<double> sigma_min, sigma_max;  // karras/exponential only
  std::optional<double> shift_terminal;

  // Missing or null keys take Diffusers' defaults; unknown keys are ignored.
  static UniPCMultistepConfig from_json(const io::JsonConfig& cfg);
  static UniPCMultistepConfig from_file(const std::filesystem::path& scheduler_config_json);
};

struct UniPCSetTimestepsOptions {
  std::optional<std::vector<double>> sigmas;  // float64 like a NumPy array (N = its length)
  std::optional<double> mu;                   // required with use_dynamic_shifting
};

class UniPCMultistepScheduler {
 public:
  explicit UniPCMultistepScheduler(UniPCMultistepConfig c = {});

  const UniPCMultistepConfig& config() const { return config_; }

  // num_inference_steps may be omitted when opts.sigmas is given.
  void set_timesteps(std::optional<int64_t> num_inference_steps, const UniPCSetTimestepsOptions& opts = {});

  const std::vector<int64_t>& timesteps() const { return timesteps_; }  // N
  const std::vector<float>& sigmas() const { return sigmas_; }          // N + 1
  int64_t num_inference_steps() const { return num_inference_steps_; }

  // lambda_i = log(1 - sigma_i) - log(sigma_i) in float32, one per sigma (N + 1).
  const std::vector<float>& lambdas() const { return lambdas_; }
  // Replaces them (e.g. with the values torch/MKL computes on the reference platform); call after
  // set_timesteps. The size must be N + 1.
  void set_lambdas(std::vector<float> lambdas);

  std::optional<int64_t> step_index() const { return step_index_; }
  std::optional<int64_t> begin_index() const { return begin_index_; }
  void set_begin_index(int64_t begin_index = 0) { begin_index_ = begin_index; }
  // Diffusers' index_for_timestep: the second match if the timestep occurs twice, the last index if
  // it does not occur.
  int64_t index_for_timestep(int64_t timestep) const;

  // One UniPC step (corrector for the previous predictor, then the predictor); returns prev_sample in
  // sample's dtype. CPU tensors, any layout; model_output and sample may differ in dtype.
  Tensor step(const Tensor& model_output, int64_t timestep, const Tensor& sample);

  // An array with the dtype a torch tensor would have (values already rounded to it).
  struct Arr {
    std::vector<float> v;
    DType dt = DType::f32;
  };

 private:
  Arr convert_model_output(const Arr& model_output, const Arr& sample) const;
  Arr predictor(const Arr& x, int64_t order) const;
  Arr corrector(const Arr& this_model_output, const Arr& last_sample, int64_t order) const;

  UniPCMultistepConfig config_;
  std::vector<float> sigmas_, lambdas_;
  std::vector<int64_t> timesteps_;
  int64_t num_inference_steps_ = 0;
  std::optional<int64_t> step_index_, begin_index_;
  std::vector<std::optional<Arr>> model_outputs_;  // solver_order slots, newest last
  std::optional<Arr> last_sample_;
  int64_t lower_order_nums_ = 0;
  int64_t this_order_ = 0;
};

}  // namespace diffq
