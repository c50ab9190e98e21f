#include "schedulers/flow_match_euler.h"

#include <cmath>
#include <fstream>

#include "diffq/error.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "FlowMatchEulerDiscreteScheduler";

// float32 ops written one per statement so nothing is contracted or kept in wider precision.
std::vector<float> to_f32(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// stretch_shift_to_terminal divides by 1 - (the last shifted sigma): when that sigma is 1 (one step,
// or custom sigmas ending at 1) Diffusers computes 0 / 0 and returns NaN sigmas; diffq refuses.
void check_terminal_stretch(double one_minus_last, double shift_terminal) {
  check(one_minus_last != 0.0, kCtx, "shift_terminal ", shift_terminal,
        " cannot stretch a schedule whose last sigma is 1 (one step, or custom sigmas ending at 1.0): "
        "the stretch divides by 1 - that sigma = 0 (Diffusers returns NaN sigmas); use at least 2 steps or "
        "a config without shift_terminal");
}
}  // namespace

// ---- config ------------------------------------------------------------------------------------------

FlowMatchEulerDiscreteConfig FlowMatchEulerDiscreteConfig::from_json(const io::JsonConfig& cfg) {
  FlowMatchEulerDiscreteConfig c;
  c.num_train_timesteps = cfg.get<int64_t>("num_train_timesteps", c.num_train_timesteps);
  c.shift = cfg.get<double>("shift", c.shift);
  c.use_dynamic_shifting = cfg.get<bool>("use_dynamic_shifting", c.use_dynamic_shifting);
  c.base_shift = cfg.get<double>("base_shift", c.base_shift);
  c.max_shift = cfg.get<double>("max_shift", c.max_shift);
  c.base_image_seq_len = cfg.get<int64_t>("base_image_seq_len", c.base_image_seq_len);
  c.max_image_seq_len = cfg.get<int64_t>("max_image_seq_len", c.max_image_seq_len);
  c.invert_sigmas = cfg.get<bool>("invert_sigmas", c.invert_sigmas);
  if (cfg.has("shift_terminal")) c.shift_terminal = cfg.require<double>("shift_terminal");
  c.use_karras_sigmas = cfg.get<bool>("use_karras_sigmas", false);
  c.use_exponential_sigmas = cfg.get<bool>("use_exponential_sigmas", false);
  c.use_beta_sigmas = cfg.get<bool>("use_beta_sigmas", false);
  c.time_shift_type = cfg.get<std::string>("time_shift_type", c.time_shift_type);
  c.stochastic_sampling = cfg.get<bool>("stochastic_sampling", false);
  check(c.num_train_timesteps > 0, kCtx, cfg.source(), ": num_train_timesteps must be positive, got ",
        c.num_train_timesteps);
  check(c.time_shift_type == "exponential" || c.time_shift_type == "linear", kCtx, cfg.source(),
        ": time_shift_type must be \"exponential\" or \"linear\", got \"", c.time_shift_type, "\"");
  check(int(c.use_karras_sigmas) + int(c.use_exponential_sigmas) + int(c.use_beta_sigmas) <= 1, kCtx,
        cfg.source(), ": only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas");
  return c;
}

FlowMatchEulerDiscreteConfig FlowMatchEulerDiscreteConfig::from_file(
    const std::filesystem::path& path) {
  return from_json(io::read_json_config(path, kCtx));
}

// ---- schedule helpers ----------------------------------------------------------------------------------

double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len,
                       double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / double(max_seq_len - base_seq_len);
  const double b = base_shift - m * double(base_seq_len);
  return double(image_seq_len) * m + b;
}

std::vector<double> np_linspace(double start, double stop, int64_t num) {
  check(num >= 0, "linspace", "number of samples must be non-negative, got ", num);
  std::vector<double> y(static_cast<size_t>(num));
  if (num == 0) return y;
  if (num == 1) {
    y[0] = start;
    return y;
  }
  const double div = double(num - 1);
  const double delta = stop - start;
  const double step = delta / div;
  for (int64_t i = 0; i < num; ++i) {
    if (step == 0) {
      y[size_t(i)] = double(i) / div * delta + start;
    } else {
      const double t = double(i) * step;
      y[size_t(i)] = t + start;
    }
  }
  y.back() = stop;
  return y;
}

std::vector<double> flux_default_sigmas(int64_t n) {
  check(n > 0, "flux", "num_inference_steps must be positive, got ", n);
  return np_linspace(1.0, 1.0 / double(n), n);
}

// ---- scheduler -------------------------------------------------------------------------------------------

FlowMatchEulerDiscreteScheduler::FlowMatchEulerDiscreteScheduler(FlowMatchEulerDiscreteConfig config)
    : config_(std::move(config)), shift_(config_.shift) {
  // __init__: timesteps 1..N (float32), sigmas = t / N in float32, static shift in float32.
  const int64_t n = config_.num_train_timesteps;
  const float nf = float(n);
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s[size_t(i)] = float(n - i) / nf;
  if (!config_.use_dynamic_shifting) {
    const float sh = float(shift_), sh1 = float(shift_ - 1.0);
    for (float& v : s) {
      const float num = sh * v;
      const float den0 = sh1 * v;
      const float den = 1.0f + den0;
      v = num / den;
    }
  }
  sigmas_ = s;
  timesteps_.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) timesteps_[i] = s[i] * nf;
  sigma_max_ = s.front();
  sigma_min_ = s.back();
}

void FlowMatchEulerDiscreteScheduler::set_timesteps(std::optional<int64_t> num_inference_steps,
                                                    const SetTimestepsOptions& o) {
  const auto& cfg = config_;
  check(!cfg.use_dynamic_shifting || o.mu.has_value(), kCtx,
        "`mu` must be passed when use_dynamic_shifting is set");
  check(!cfg.use_beta_sigmas, kCtx, "use_beta_sigmas (scipy beta ppf) is not supported");
  if (o.sigmas && o.timesteps)
    check(o.sigmas->size() == o.timesteps->size(), kCtx,
          "sigmas and timesteps must have the same length (", o.sigmas->size(), " vs ",
          o.timesteps->size(), ")");
  int64_t n;
  if (num_inference_steps) {
    n = *num_inference_steps;
    check((!o.sigmas || int64_t(o.sigmas->size()) == n) &&
              (!o.timesteps || int64_t(o.timesteps->size()) == n),
          kCtx, "sigmas/timesteps must have num_inference_steps (", n, ") entries");
  } else {
    check(o.sigmas || o.timesteps, kCtx, "give num_inference_steps, sigmas or timesteps");
    n = int64_t(o.sigmas ? o.sigmas->size() : o.timesteps->size());
  }
  check(n > 0, kCtx, "num_inference_steps must be positive, got ", n);
  num_inference_steps_ = n;
  const double ntt = double(cfg.num_train_timesteps);

  std::vector<float> sig;   // float32 schedule after shifting
  std::vector<double> sd;   // the same before the final float32 rounding (float64 path)
  std::vector<float> custom_t;
  if (o.timesteps) custom_t = to_f32(*o.timesteps);
  if (o.sigmas || o.timesteps) {
    // float32 path (NumPy float32 arrays with Python scalars).
    if (o.sigmas) {
      sig = to_f32(*o.sigmas);
    } else {
      sig.resize(custom_t.size());
      const float d = float(ntt);
      for (size_t i = 0; i < sig.size(); ++i) sig[i] = custom_t[i] / d;
    }
    if (cfg.use_dynamic_shifting) {
      const bool lin = cfg.time_shift_type == "linear";
      const float e = lin ? float(*o.mu) : float(std::exp(*o.mu));
      for (float& t : sig) {
        const float inv = 1.0f / t;
        const float r = inv - 1.0f;  // ** 1.0 is exact
        const float den = e + r;
        t = e / den;
      }
    } else {
      const float sh = float(shift_), sh1 = float(shift_ - 1.0);
      for (float& t : sig) {
        const float num = sh * t;
        const float den0 = sh1 * t;
        const float den = 1.0f + den0;
        t = num / den;
      }
    }
    if (cfg.shift_terminal && *cfg.shift_terminal != 0.0) {
      const float last = 1.0f - sig.back();
      check_terminal_stretch(double(last), *cfg.shift_terminal);
      const float scale = last / float(1.0 - *cfg.shift_terminal);
      for (float& t : sig) {
        const float omz = 1.0f - t;
        const float q = omz / scale;
        t = 1.0f - q;
      }
    }
    sd.assign(sig.begin(), sig.end());
  } else {
    // float64 path: default linspace in timestep units.
    std::vector<double> s = np_linspace(double(sigma_max_) * ntt, double(sigma_min_) * ntt, n);
    for (double& t : s) t = t / ntt;
    if (cfg.use_dynamic_shifting) {
      const double e = cfg.time_shift_type == "linear" ? *o.mu : std::exp(*o.mu);
      for (double& t : s) t = e / (e + std::pow(1.0 / t - 1.0, 1.0));
    } else {
      for (double& t : s) t = shift_ * t / (1.0 + (shift_ - 1.0) * t);
    }
    if (cfg.shift_terminal && *cfg.shift_terminal != 0.0) {
      check_terminal_stretch(1.0 - s.back(), *cfg.shift_terminal);
      const double scale = (1.0 - s.back()) / (1.0 - *cfg.shift_terminal);
      for (double& t : s) t = 1.0 - (1.0 - t) / scale;
    }
    sd = s;
    sig = to_f32(s);
  }

  if (cfg.use_karras_sigmas || cfg.use_exponential_sigmas) {
    // The ends as Python floats (in_sigmas[-1].item(), in_sigmas[0].item()); float64 from here.
    const double smin = sd.back(), smax = sd.front();
    std::vector<double> out;
    if (cfg.use_karras_sigmas) {
      const double rho = 7.0;
      const double lo = std::pow(smin, 1.0 / rho), hi = std::pow(smax, 1.0 / rho);
      for (double r : np_linspace(0.0, 1.0, n)) out.push_back(std::pow(hi + r * (lo - hi), rho));
    } else {
      for (double l : np_linspace(std::log(smax), std::log(smin), n)) out.push_back(std::exp(l));
    }
    sig = to_f32(out);
  }

  const float nf = float(ntt);
  std::vector<float> ts(sig.size());
  if (o.timesteps) {
    ts = custom_t;
  } else {
    for (size_t i = 0; i < sig.size(); ++i) ts[i] = sig[i] * nf;
  }
  if (cfg.invert_sigmas) {
    for (size_t i = 0; i < sig.size(); ++i) {
      sig[i] = 1.0f - sig[i];
      ts[i] = sig[i] * nf;
    }
    sig.push_back(1.0f);
  } else {
    sig.push_back(0.0f);
  }
  timesteps_ = std::move(ts);
  sigmas_ = std::move(sig);
  step_index_.reset();
  begin_index_.reset();
}

int64_t FlowMatchEulerDiscreteScheduler::index_for_timestep(float timestep) const {
  std::vector<int64_t> hits;
  for (size_t i = 0; i < timesteps_.size(); ++i)
    if (timesteps_[i] == timestep) hits.push_back(int64_t(i));
  check(!hits.empty(), kCtx, "timestep ", timestep, " is not in the schedule");
  return hits.size() > 1 ? hits[1] : hits[0];
}

Tensor FlowMatchEulerDiscreteScheduler::step(const Tensor& model_output, float timestep,
                                             const Tensor& sample) {
  check(!config_.stochastic_sampling, kCtx, "stochastic_sampling is not supported");
  check(!sigmas_.empty() && num_inference_steps_ > 0, kCtx, "call set_timesteps before step");
  check(model_output.shape() == sample.shape(), kCtx, "model_output ", model_output.str(),
        " and sample ", sample.str(), " differ in shape");
  const DType out_dt = model_output.dtype();
  check(out_dt == DType::f32 || out_dt == DType::bf16 || out_dt == DType::f16, kCtx,
        "model_output must be float32, bfloat16 or float16, got ", dtype_name(out_dt));
  if (!step_index_) step_index_ = begin_index_ ? *begin_index_ : index_for_timestep(timestep);
  const int64_t i = *step_index_;
  check(i + 1 < int64_t(sigmas_.size()), kCtx, "step ", i, " is past the end of the schedule (",
        num_inference_steps_, " steps)");
  const float dt = sigmas_[size_t(i + 1)] - sigmas_[size_t(i)];

  std::vector<float> s = sample.to_f32_vector();
  const std::vector<float> v = model_output.to_f32_vector();
  std::vector<float> prev(s.size());
  if (out_dt == DType::f32) {
    for (size_t k = 0; k < s.size(); ++k) {
      const float p = dt * v[k];
      prev[k] = s[k] + p;
    }
  } else {
    // dt * v in the half dtype (dt rounded to it, product rounded to it), then + f32 sample.
    const Tensor dt_h = Tensor::from_vector({dt}, {1}, out_dt);
    const float dt_r = dt_h.to_f32_vector()[0];
    std::vector<float> prod(v.size());
    for (size_t k = 0; k < v.size(); ++k) prod[k] = dt_r * v[k];
    const std::vector<float> prod_r =
        Tensor::from_vector(prod, {int64_t(prod.size())}, out_dt).to_f32_vector();
    for (size_t k = 0; k < s.size(); ++k) prev[k] = s[k] + prod_r[k];
  }
  step_index_ = i + 1;
  // The update is computed on the host (bit-exact with torch's rounding); the result goes back to the
  // sample's device (a pipeline on a GPU copies the latents down and up once per step).
  return Tensor::from_vector(prev, sample.shape(), out_dt).to(sample.device());
}

}  // namespace diffq
