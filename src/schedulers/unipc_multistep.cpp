#include "schedulers/unipc_multistep.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "diffq/error.h"
#include "schedulers/flow_match_euler.h"  // np_linspace

namespace diffq {

namespace {
constexpr const char* kCtx = "UniPCMultistepScheduler";
using Arr = UniPCMultistepScheduler::Arr;

// ---- torch's float32 scalar math (0-dim tensors), one rounding per op -------------------------------
float log_f32(float x) { return float(std::log(double(x))); }      // MKL vsLn differs by 1 ulp at times
float expm1_f32(float x) { return float(std::expm1(double(x))); }  // SLEEF expm1f_u10 differs rarely

// ---- torch's elementwise dtype rules on CPU ---------------------------------------------------------
// tensor-tensor promotion among the float dtypes diffq steps with.
DType promote(DType a, DType b) {
  if (a == b) return a;
  return DType::f32;  // f32 with anything, or bf16 with f16
}

Arr make(std::vector<float> v, DType dt) {
  for (float& x : v) x = round_through(dt, x);
  return {std::move(v), dt};
}

// scalar (a float32 0-dim tensor) * tensor: the scalar is cast to the tensor's dtype first.
Arr smul(float s, const Arr& a) {
  const float sr = round_through(a.dt, s);
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = sr * a.v[k];
  return make(std::move(o), a.dt);
}

// tensor / scalar: torch keeps the scalar's float value for bf16/f16 (its reduced-float scalar path).
Arr div_s(const Arr& a, float s) {
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = a.v[k] / s;
  return make(std::move(o), a.dt);
}

// tensor - scalar / tensor + scalar (the scalar only ever 0 or NaN here: its rounding cannot matter).
Arr sub_s(const Arr& a, float s) {
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = a.v[k] - s;
  return make(std::move(o), a.dt);
}
Arr add_s(const Arr& a, float s) {
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = a.v[k] + s;
  return make(std::move(o), a.dt);
}

Arr sub(const Arr& a, const Arr& b) {
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = a.v[k] - b.v[k];
  return make(std::move(o), promote(a.dt, b.dt));
}
Arr add(const Arr& a, const Arr& b) {
  std::vector<float> o(a.v.size());
  for (size_t k = 0; k < o.size(); ++k) o[k] = a.v[k] + b.v[k];
  return make(std::move(o), promote(a.dt, b.dt));
}

// einsum("k,bkc...->bc...", rhos, D1s): per element sum_k rho_k * D_k, products and sums in float32
// (no FMA; torch's bmm for K = 2 matched this on float32), rounded once to the result dtype.
Arr einsum_k(const std::vector<float>& rhos, DType rho_dt, const std::vector<Arr>& ds) {
  DType dt = rho_dt;
  for (const Arr& d : ds) dt = promote(dt, d.dt);
  std::vector<float> o(ds[0].v.size());
  for (size_t e = 0; e < o.size(); ++e) {
    float acc = rhos[0] * ds[0].v[e];
    for (size_t k = 1; k < ds.size(); ++k) {
      const float p = rhos[k] * ds[k].v[e];
      acc = acc + p;
    }
    o[e] = acc;
  }
  return make(std::move(o), dt);
}

// torch.linalg.solve on a small float32 system as MKL's sgesv does it (checked on 2x2): LU with partial
// pivoting (first largest |pivot|), multipliers a_ik * (1 / a_kk), forward substitution without FMA,
// back substitution multiplying by the pivot's reciprocal.
// A pivot that is exactly zero is sgetrf's info > 0, where torch.linalg.solve raises "the input matrix is
// singular" (Diffusers' UniPC then raises too): refuse the same way.
std::vector<float> lapack_solve(std::vector<std::vector<float>> a, std::vector<float> b, int64_t step,
                                const char* stage) {
  const size_t n = b.size();
  for (size_t k = 0; k < n; ++k) {
    size_t p = k;
    for (size_t i = k + 1; i < n; ++i)
      if (std::fabs(a[i][k]) > std::fabs(a[p][k])) p = i;
    std::swap(a[k], a[p]);
    std::swap(b[k], b[p]);
    check(a[k][k] != 0.0f, kCtx, "step ", step, ": the ", stage, "'s ", n, "x", n,
          " solve for rhos is singular (an order >= 3 update into sigma = 0 with lower_order_final = false); "
          "torch.linalg.solve raises here in Diffusers too. Set lower_order_final = true or a lower solver_order");
    const float r = 1.0f / a[k][k];
    for (size_t i = k + 1; i < n; ++i) {
      a[i][k] = a[i][k] * r;
      for (size_t j = k + 1; j < n; ++j) {
        const float t = a[i][k] * a[k][j];
        a[i][j] = a[i][j] - t;
      }
    }
  }
  for (size_t k = 0; k < n; ++k)
    for (size_t i = k + 1; i < n; ++i) {
      const float t = b[k] * a[i][k];
      b[i] = b[i] - t;
    }
  for (size_t k = n; k-- > 0;) {
    const float r = 1.0f / a[k][k];
    b[k] = b[k] * r;
    for (size_t i = 0; i < k; ++i) {
      const float t = b[k] * a[i][k];
      b[i] = b[i] - t;
    }
  }
  return b;
}

// torch.pow(rks, e) for the small integer exponents UniPC uses.
float ipow(float x, int64_t e) {
  if (e == 0) return 1.0f;
  float r = x;
  for (int64_t i = 1; i < e; ++i) r = r * x;
  return r;
}

// The B(h) coefficients shared by the predictor and the corrector (all float32 0-dim ops).
struct Coeffs {
  float h = 0, hh = 0, h_phi_1 = 0, B_h = 0;
  std::vector<float> rks;                  // order entries, the last 1
  std::vector<std::vector<float>> R;       // order x order
  std::vector<float> b;                    // order
};

Coeffs bh_coeffs(const std::vector<float>& lambdas, int64_t t, int64_t s0,
                 const std::vector<int64_t>& si, bool predict_x0, bool bh1) {
  Coeffs c;
  const float lambda_s0 = lambdas[size_t(s0)];
  c.h = lambdas[size_t(t)] - lambda_s0;
  for (int64_t i : si) {
    const float d = lambdas[size_t(i)] - lambda_s0;
    c.rks.push_back(d / c.h);
  }
  c.rks.push_back(1.0f);
  const int64_t order = int64_t(c.rks.size());
  c.hh = predict_x0 ? -c.h : c.h;
  c.h_phi_1 = expm1_f32(c.hh);
  float h_phi_k = c.h_phi_1 / c.hh;
  h_phi_k = h_phi_k - 1.0f;
  int64_t factorial_i = 1;
  c.B_h = bh1 ? c.hh : expm1_f32(c.hh);
  for (int64_t i = 1; i <= order; ++i) {
    std::vector<float> row;
    for (float rk : c.rks) row.push_back(ipow(rk, i - 1));
    c.R.push_back(std::move(row));
    const float num = h_phi_k * float(factorial_i);
    c.b.push_back(num / c.B_h);
    factorial_i *= i + 1;
    const float q = h_phi_k / c.hh;
    h_phi_k = q - float(1.0 / double(factorial_i));
  }
  return c;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

Arr arr_of(const Tensor& t) {
  const DType dt = t.dtype();
  check(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, kCtx,
        "tensors must be float32, bfloat16 or float16, got ", dtype_name(dt));
  return {t.to_f32_vector(), dt};
}
}  // namespace

// ---- config ------------------------------------------------------------------------------------------

UniPCMultistepConfig UniPCMultistepConfig::from_json(const io::JsonConfig& cfg) {
  UniPCMultistepConfig c;
  c.num_train_timesteps = cfg.get<int64_t>("num_train_timesteps", c.num_train_timesteps);
  c.beta_start = cfg.get<double>("beta_start", c.beta_start);
  c.beta_end = cfg.get<double>("beta_end", c.beta_end);
  c.beta_schedule = cfg.get<std::string>("beta_schedule", c.beta_schedule);
  c.has_trained_betas = cfg.has("trained_betas");
  c.solver_order = cfg.get<int64_t>("solver_order", c.solver_order);
  c.prediction_type = cfg.get<std::string>("prediction_type", c.prediction_type);
  c.thresholding = cfg.get<bool>("thresholding", c.thresholding);
  c.dynamic_thresholding_ratio = cfg.get<double>("dynamic_thresholding_ratio", c.dynamic_thresholding_ratio);
  c.sample_max_value = cfg.get<double>("sample_max_value", c.sample_max_value);
  c.predict_x0 = cfg.get<bool>("predict_x0", c.predict_x0);
  c.solver_type = cfg.get<std::string>("solver_type", c.solver_type);
  c.lower_order_final = cfg.get<bool>("lower_order_final", c.lower_order_final);
  c.disable_corrector = cfg.get<std::vector<int64_t>>("disable_corrector", c.disable_corrector);
  c.use_karras_sigmas = cfg.get<bool>("use_karras_sigmas", false);
  c.use_exponential_sigmas = cfg.get<bool>("use_exponential_sigmas", false);
  c.use_beta_sigmas = cfg.get<bool>("use_beta_sigmas", false);
  c.use_flow_sigmas = cfg.get<bool>("use_flow_sigmas", false);
  c.flow_shift = cfg.get<double>("flow_shift", c.flow_shift);
  c.timestep_spacing = cfg.get<std::string>("timestep_spacing", c.timestep_spacing);
  c.steps_offset = cfg.get<int64_t>("steps_offset", c.steps_offset);
  c.final_sigmas_type = cfg.get<std::string>("final_sigmas_type", c.final_sigmas_type);
  c.rescale_betas_zero_snr = cfg.get<bool>("rescale_betas_zero_snr", false);
  c.use_dynamic_shifting = cfg.get<bool>("use_dynamic_shifting", false);
  c.time_shift_type = cfg.get<std::string>("time_shift_type", c.time_shift_type);
  if (cfg.has("sigma_min")) c.sigma_min = cfg.require<double>("sigma_min");
  if (cfg.has("sigma_max")) c.sigma_max = cfg.require<double>("sigma_max");
  if (cfg.has("shift_terminal")) c.shift_terminal = cfg.require<double>("shift_terminal");

  const std::string& src = cfg.source();
  check(c.num_train_timesteps > 0, kCtx, src, ": num_train_timesteps must be positive, got ",
        c.num_train_timesteps);
  check(c.solver_order >= 1, kCtx, src, ": solver_order must be >= 1, got ", c.solver_order);
  if (c.solver_type == "midpoint" || c.solver_type == "heun" || c.solver_type == "logrho")
    c.solver_type = "bh2";
  check(c.solver_type == "bh1" || c.solver_type == "bh2", kCtx, src, ": solver_type \"", c.solver_type,
        "\" is not implemented (bh1, bh2)");
  check(c.prediction_type == "epsilon" || c.prediction_type == "sample" ||
            c.prediction_type == "v_prediction" || c.prediction_type == "flow_prediction",
        kCtx, src, ": unknown prediction_type \"", c.prediction_type, "\"");
  check(c.final_sigmas_type == "zero" || c.final_sigmas_type == "sigma_min", kCtx, src,
        ": final_sigmas_type must be \"zero\" or \"sigma_min\", got \"", c.final_sigmas_type, "\"");
  check(c.time_shift_type == "exponential", kCtx, src, ": time_shift_type must be \"exponential\", got \"",
        c.time_shift_type, "\"");
  check(int(c.use_karras_sigmas) + int(c.use_exponential_sigmas) + int(c.use_beta_sigmas) <= 1, kCtx, src,
        ": only one of use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas");
  check(!c.shift_terminal || c.use_flow_sigmas, kCtx, src,
        ": shift_terminal is only supported with use_flow_sigmas");
  return c;
}

UniPCMultistepConfig UniPCMultistepConfig::from_file(const std::filesystem::path& path) {
  return from_json(io::read_json_config(path, kCtx));
}

// ---- schedule ------------------------------------------------------------------------------------------

UniPCMultistepScheduler::UniPCMultistepScheduler(UniPCMultistepConfig c) : config_(std::move(c)) {
  check(config_.solver_order >= 1, kCtx, "solver_order must be >= 1, got ", config_.solver_order);
}

void UniPCMultistepScheduler::set_timesteps(std::optional<int64_t> num_inference_steps,
                                            const UniPCSetTimestepsOptions& o) {
  const auto& cfg = config_;
  check(cfg.use_flow_sigmas, kCtx,
        "use_flow_sigmas = false (the beta_schedule \"", cfg.beta_schedule,
        "\" path) is not implemented; diffq supports UniPC's flow path (use_flow_sigmas = true) only");
  check(!cfg.use_karras_sigmas && !cfg.use_exponential_sigmas && !cfg.use_beta_sigmas, kCtx,
        "use_karras_sigmas / use_exponential_sigmas / use_beta_sigmas are not implemented");
  check(!cfg.thresholding, kCtx, "thresholding = true is not implemented");
  check(!cfg.use_dynamic_shifting || o.mu.has_value(), kCtx,
        "`mu` must be passed when use_dynamic_shifting is set");
  check(!o.mu || cfg.use_dynamic_shifting, kCtx, "mu is only used with use_dynamic_shifting");
  check(cfg.final_sigmas_type == "zero" || cfg.final_sigmas_type == "sigma_min", kCtx,
        "final_sigmas_type must be \"zero\" or \"sigma_min\", got \"", cfg.final_sigmas_type, "\"");
  const double T = double(cfg.num_train_timesteps);

  std::vector<double> s;
  if (o.sigmas) {
    s = *o.sigmas;
  } else {
    check(num_inference_steps.has_value(), kCtx, "give num_inference_steps or sigmas");
    check(*num_inference_steps > 0, kCtx, "num_inference_steps must be positive, got ",
          *num_inference_steps);
    s = np_linspace(1.0, 1.0 / T, *num_inference_steps + 1);
    s.pop_back();
  }
  check(!s.empty(), kCtx, "sigmas must not be empty");
  // float64 (NumPy) from here until the final float32 rounding.
  if (cfg.use_dynamic_shifting) {
    const double e = std::exp(*o.mu);
    for (double& t : s) t = e / (e + std::pow(1.0 / t - 1.0, 1.0));
  } else {
    const double k = cfg.flow_shift;
    for (double& t : s) t = k * t / (1.0 + (k - 1.0) * t);
  }
  if (cfg.shift_terminal && *cfg.shift_terminal != 0.0) {
    const double scale = (1.0 - s.back()) / (1.0 - *cfg.shift_terminal);
    for (double& t : s) t = 1.0 - (1.0 - t) / scale;
  }
  const double eps = 1e-6;
  if (std::fabs(s[0] - 1.0) < eps) s[0] -= eps;  // keeps log(alpha) finite in the first updates

  timesteps_.clear();
  for (double t : s) timesteps_.push_back(int64_t(t * T));  // astype(int64): truncation
  sigmas_.assign(s.begin(), s.end());
  sigmas_.push_back(cfg.final_sigmas_type == "sigma_min" ? float(s.back()) : 0.0f);
  num_inference_steps_ = int64_t(timesteps_.size());

  // lambda = log(alpha) - log(sigma), alpha = 1 - sigma (float32 0-dim ops).
  lambdas_.clear();
  for (float sig : sigmas_) {
    const float alpha = 1.0f - sig;
    lambdas_.push_back(log_f32(alpha) - log_f32(sig));
  }

  model_outputs_.assign(size_t(cfg.solver_order), std::nullopt);
  last_sample_.reset();
  lower_order_nums_ = 0;
  this_order_ = 0;
  step_index_.reset();
  begin_index_.reset();
}

void UniPCMultistepScheduler::set_lambdas(std::vector<float> lambdas) {
  check(lambdas.size() == sigmas_.size(), kCtx, "set_lambdas needs ", sigmas_.size(),
        " values (one per sigma), got ", lambdas.size());
  lambdas_ = std::move(lambdas);
}

int64_t UniPCMultistepScheduler::index_for_timestep(int64_t timestep) const {
  std::vector<int64_t> hits;
  for (size_t i = 0; i < timesteps_.size(); ++i)
    if (timesteps_[i] == timestep) hits.push_back(int64_t(i));
  if (hits.empty()) return int64_t(timesteps_.size()) - 1;
  return hits.size() > 1 ? hits[1] : hits[0];
}

// ---- step ----------------------------------------------------------------------------------------------

Arr UniPCMultistepScheduler::convert_model_output(const Arr& mo, const Arr& sample) const {
  const float sigma = sigmas_[size_t(*step_index_)];
  const float alpha_t = 1.0f - sigma, sigma_t = sigma;
  const std::string& p = config_.prediction_type;
  if (config_.predict_x0) {
    if (p == "epsilon") return div_s(sub(sample, smul(sigma_t, mo)), alpha_t);
    if (p == "sample") return mo;
    if (p == "v_prediction") return sub(smul(alpha_t, sample), smul(sigma_t, mo));
    return sub(sample, smul(sigma, mo));  // flow_prediction
  }
  if (p == "epsilon") return mo;
  if (p == "sample") return div_s(sub(sample, smul(alpha_t, mo)), sigma_t);
  if (p == "v_prediction") return add(smul(alpha_t, mo), smul(sigma_t, sample));
  fail(kCtx, "prediction_type \"", p, "\" needs predict_x0 = true");
}

// UniP: x_t from x = sample at sigma_{i} to sigma_{i+1}.
Arr UniPCMultistepScheduler::predictor(const Arr& x, int64_t order) const {
  const int64_t i = *step_index_;
  const size_t M = model_outputs_.size();
  const Arr& m0 = *model_outputs_[M - 1];
  std::vector<int64_t> si;
  for (int64_t k = 1; k < order; ++k) si.push_back(i - k);
  const Coeffs c = bh_coeffs(lambdas_, i + 1, i, si, config_.predict_x0, config_.solver_type == "bh1");
  const float sigma_t = sigmas_[size_t(i + 1)], sigma_s0 = sigmas_[size_t(i)];
  const float alpha_t = 1.0f - sigma_t, alpha_s0 = 1.0f - sigma_s0;

  std::optional<Arr> pred_res;
  if (order >= 2) {
    std::vector<Arr> D1s;
    for (int64_t k = 1; k < order; ++k)
      D1s.push_back(div_s(sub(*model_outputs_[M - 1 - size_t(k)], m0), c.rks[size_t(k - 1)]));
    std::vector<float> rhos;
    if (order == 2) {
      rhos = {0.5f};
    } else {
      std::vector<std::vector<float>> R(size_t(order - 1));
      for (size_t r = 0; r + 1 < size_t(order); ++r)
        R[r].assign(c.R[r].begin(), c.R[r].end() - 1);
      rhos = lapack_solve(R, std::vector<float>(c.b.begin(), c.b.end() - 1), i, "predictor");
      for (float& v : rhos) v = round_through(x.dt, v);
    }
    pred_res = einsum_k(rhos, x.dt, D1s);
  }
  const bool x0 = config_.predict_x0;
  const float c_x = x0 ? sigma_t / sigma_s0 : alpha_t / alpha_s0;
  const float a_or_s = x0 ? alpha_t : sigma_t;
  const float c_m = a_or_s * c.h_phi_1;
  const Arr x_t_ = sub(smul(c_x, x), smul(c_m, m0));
  const float c_r = a_or_s * c.B_h;
  Arr x_t = pred_res ? sub(x_t_, smul(c_r, *pred_res)) : sub_s(x_t_, c_r * 0.0f);
  return make(std::move(x_t.v), x.dt);
}

// UniC: corrects this_sample (the last predictor's output) with the model output at it.
Arr UniPCMultistepScheduler::corrector(const Arr& model_t, const Arr& x, int64_t order) const {
  const int64_t i = *step_index_;
  const size_t M = model_outputs_.size();
  const Arr& m0 = *model_outputs_[M - 1];
  std::vector<int64_t> si;
  for (int64_t k = 1; k < order; ++k) si.push_back(i - (k + 1));
  const Coeffs c = bh_coeffs(lambdas_, i, i - 1, si, config_.predict_x0, config_.solver_type == "bh1");
  const float sigma_t = sigmas_[size_t(i)], sigma_s0 = sigmas_[size_t(i - 1)];
  const float alpha_t = 1.0f - sigma_t, alpha_s0 = 1.0f - sigma_s0;

  std::vector<Arr> D1s;
  for (int64_t k = 1; k < order; ++k)
    D1s.push_back(div_s(sub(*model_outputs_[M - 1 - size_t(k)], m0), c.rks[size_t(k - 1)]));
  std::vector<float> rhos;
  if (order == 1) {
    rhos = {0.5f};
  } else {
    rhos = lapack_solve(c.R, c.b, i, "corrector");
    for (float& v : rhos) v = round_through(x.dt, v);
  }
  const bool x0 = config_.predict_x0;
  const float c_x = x0 ? sigma_t / sigma_s0 : alpha_t / alpha_s0;
  const float a_or_s = x0 ? alpha_t : sigma_t;
  const float c_m = a_or_s * c.h_phi_1;
  const Arr x_t_ = sub(smul(c_x, x), smul(c_m, m0));
  const Arr D1_t = sub(model_t, m0);
  const Arr last = smul(rhos.back(), D1_t);
  Arr inner;
  if (D1s.empty()) {
    inner = add_s(last, 0.0f);  // `0 + tensor`
  } else {
    rhos.pop_back();
    inner = add(einsum_k(rhos, x.dt, D1s), last);
  }
  const float c_r = a_or_s * c.B_h;
  Arr x_t = sub(x_t_, smul(c_r, inner));
  return make(std::move(x_t.v), x.dt);
}

Tensor UniPCMultistepScheduler::step(const Tensor& model_output, int64_t timestep, const Tensor& sample) {
  check(num_inference_steps_ > 0, kCtx, "call set_timesteps before step");
  check(model_output.shape() == sample.shape(), kCtx, "model_output ", model_output.str(), " and sample ",
        sample.str(), " differ in shape");
  if (!step_index_) step_index_ = begin_index_ ? *begin_index_ : index_for_timestep(timestep);
  const int64_t i = *step_index_;
  check(i >= 0 && i < num_inference_steps_, kCtx, "step ", i, " is past the end of the schedule (",
        num_inference_steps_, " steps)");
  const Arr mo = arr_of(model_output);
  Arr x = arr_of(sample);

  const bool use_corrector =
      i > 0 && last_sample_.has_value() &&
      std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(), i - 1) ==
          config_.disable_corrector.end();
  Arr converted = convert_model_output(mo, x);
  if (use_corrector) x = corrector(converted, *last_sample_, this_order_);

  for (size_t k = 0; k + 1 < model_outputs_.size(); ++k) model_outputs_[k] = std::move(model_outputs_[k + 1]);
  model_outputs_.back() = std::move(converted);

  int64_t order = config_.solver_order;
  if (config_.lower_order_final) order = std::min(order, num_inference_steps_ - i);
  this_order_ = std::min(order, lower_order_nums_ + 1);
  check(this_order_ > 0, kCtx, "internal: order ", this_order_);
  for (int64_t k = 1; k < this_order_; ++k)
    check(model_outputs_[model_outputs_.size() - 1 - size_t(k)].has_value(), kCtx,
          "internal: missing model output");

  Arr prev = predictor(x, this_order_);
  // Some configs divide by zero at a step (bh1's B(h) = h or an order >= 2 update into sigma = 0, where
  // lambda = inf; h = 0 between two equal sigmas): Diffusers returns NaN latents there. Refuse instead of
  // writing a NaN video, but only when the scheduler itself made them (finite model output and sample).
  if (!all_finite(prev.v) && all_finite(mo.v) && all_finite(arr_of(sample).v))
    fail(kCtx, "step ", i, " of ", num_inference_steps_, " (sigma ", sigmas_[size_t(i)], " -> ", sigmas_[size_t(i + 1)],
         ", order ", this_order_, ") gives non-finite latents from finite inputs: solver_order ", config_.solver_order,
         ", solver_type ", config_.solver_type, ", lower_order_final ", config_.lower_order_final ? "true" : "false",
         ", final_sigmas_type ", config_.final_sigmas_type,
         " divides by zero here (Diffusers returns NaN latents). lower_order_final = true with solver_type = bh2 "
         "avoids it");
  last_sample_ = std::move(x);
  if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  step_index_ = i + 1;
  return Tensor::from_vector(prev.v, sample.shape(), prev.dt).to(sample.device());  // host maths, back to the sample's device
}

}  // namespace diffq
