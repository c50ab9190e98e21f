// UniPCMultistepScheduler (flow path, as WanPipeline uses it) against Diffusers 0.42.1 / torch 2.15
// (tests/fixtures/unipc/, made by tools/reference/make_unipc_fixtures.py), and the
// FlowMatchEulerDiscreteScheduler(shift=7.0) schedule WanPipeline gets from set_timesteps(N).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/error.h"
#include "io/safetensors.h"
#include "schedulers/flow_match_euler.h"
#include "schedulers/unipc_multistep.h"

namespace {

using diffq::Tensor;
using diffq::UniPCMultistepConfig;
using diffq::UniPCMultistepScheduler;

const std::string kDir = DIFFQ_SOURCE_DIR "/tests/fixtures/unipc/";

const diffq::io::SafetensorsFile& steps_file() {
  static const auto f = diffq::io::SafetensorsFile::open(kDir + "unipc.safetensors");
  return f;
}
const diffq::io::SafetensorsFile& schedules_file() {
  static const auto f = diffq::io::SafetensorsFile::open(kDir + "schedules.safetensors");
  return f;
}
const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}
std::vector<int64_t> i64_of(const Tensor& t) {
  EXPECT_EQ(t.dtype(), diffq::DType::i64);
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

UniPCMultistepScheduler make(const nlohmann::json& c, int64_t n) {
  UniPCMultistepScheduler s(UniPCMultistepConfig::from_json(diffq::io::JsonConfig(c["config"], "cases.json")));
  diffq::UniPCSetTimestepsOptions o;
  const auto& extra = c["set_timesteps"];
  if (extra.contains("mu")) o.mu = extra["mu"].get<double>();
  if (extra.contains("sigmas")) o.sigmas = extra["sigmas"].get<std::vector<double>>();
  s.set_timesteps(n, o);
  s.set_begin_index(0);
  return s;
}

// Replays one case's step() sequence; returns max|d| / max|ref| over all steps and counts the steps
// whose output is not bit-identical.
struct Replay {
  double max_rel = 0;
  int inexact_steps = 0, steps = 0, refused = 0;
};
Replay replay(const std::string& name, int64_t n, bool torch_lambdas) {
  const auto& f = steps_file();
  const std::string p = name + ".n" + std::to_string(n) + ".";
  UniPCMultistepScheduler s = make(cases()[name], n);
  EXPECT_EQ(bits_of(s.sigmas()), bits_of(f.tensor(p + "sigmas").to_f32_vector())) << p;
  EXPECT_EQ(s.timesteps(), i64_of(f.tensor(p + "timesteps"))) << p;
  if (torch_lambdas) s.set_lambdas(f.tensor(p + "lambdas").to_f32_vector());
  Tensor x = f.tensor(p + "sample0");
  Replay r;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor ref = f.tensor(p + "prev" + std::to_string(i));
    bool ref_finite = true;
    for (float v : ref.to_f32_vector()) ref_finite = ref_finite && std::isfinite(v);
    if (!ref_finite) {  // Diffusers divides by zero here (NaN latents): diffq refuses (test_unipc_refusals.cpp)
      EXPECT_THROW(s.step(f.tensor(p + "mo" + std::to_string(i)), s.timesteps()[size_t(i)], x), diffq::Error) << p << i;
      ++r.refused;
      return r;
    }
    Tensor out = s.step(f.tensor(p + "mo" + std::to_string(i)), s.timesteps()[size_t(i)], x);
    EXPECT_EQ(out.dtype(), ref.dtype()) << p << i;
    const auto a = out.to_f32_vector(), b = ref.to_f32_vector();
    double md = 0, mr = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      md = std::max(md, double(std::fabs(a[k] - b[k])));
      mr = std::max(mr, double(std::fabs(b[k])));
    }
    if (bits_of(a) != bits_of(b)) ++r.inexact_steps;
    r.max_rel = std::max(r.max_rel, md / mr);
    ++r.steps;
    x = out;
  }
  EXPECT_EQ(s.step_index().value(), n);
  return r;
}

TEST(UniPC, SchedulesBitExact) {
  const auto& f = schedules_file();
  int checked = 0;
  for (double shift : {3.0, 5.0}) {
    std::vector<int64_t> ns;
    for (int64_t n = 1; n <= 30; ++n) ns.push_back(n);
    for (int64_t n : {40, 50, 60, 100, 250, 1000}) ns.push_back(n);
    for (int64_t n : ns) {
      UniPCMultistepConfig c;
      c.prediction_type = "flow_prediction";
      c.use_flow_sigmas = true;
      c.flow_shift = shift;
      UniPCMultistepScheduler s(c);
      s.set_timesteps(n);
      const std::string p = "unipc_s" + std::to_string(int(shift)) + ".n" + std::to_string(n) + ".";
      SCOPED_TRACE(p);
      ASSERT_EQ(s.sigmas().size(), size_t(n + 1));
      EXPECT_EQ(bits_of(s.sigmas()), bits_of(f.tensor(p + "sigmas").to_f32_vector()));
      EXPECT_EQ(s.timesteps(), i64_of(f.tensor(p + "timesteps")));
      EXPECT_EQ(s.num_inference_steps(), n);
      EXPECT_EQ(s.sigmas().back(), 0.0f);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 72);
}

// diffq's lambdas use the correctly rounded log; torch's come from MKL's vsLn (< 1 ulp from the true log):
// lambda = log(alpha) - log(sigma) then differs by at most an ulp of each log and of lambda (most are
// identical).
TEST(UniPC, LambdasWithinOneUlpOfTorch) {
  const auto& f = schedules_file();
  int same = 0, total = 0;
  for (int shift : {3, 5})
    for (int64_t n : {10, 50, 250, 1000}) {
      UniPCMultistepConfig c;
      c.prediction_type = "flow_prediction";
      c.use_flow_sigmas = true;
      c.flow_shift = shift;
      UniPCMultistepScheduler s(c);
      s.set_timesteps(n);
      const std::string p = "unipc_s" + std::to_string(shift) + ".n" + std::to_string(n) + ".";
      const auto want = f.tensor(p + "lambdas").to_f32_vector();
      ASSERT_EQ(want.size(), s.lambdas().size());
      for (size_t i = 0; i < want.size(); ++i) {
        const float a = s.lambdas()[i], b = want[i];
        ++total;
        if (std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b)) {
          ++same;
          continue;
        }
        const double sg = s.sigmas()[i];
        const float la = float(std::fabs(std::log(1.0 - sg))), ls = float(std::fabs(std::log(sg)));
        const float lb = std::fabs(b);  // and the subtraction's own rounding
        const double tol = double(std::nextafter(la, 1e30f) - la) + double(std::nextafter(ls, 1e30f) - ls) +
                           double(std::nextafter(lb, 1e30f) - lb);
        EXPECT_LE(std::fabs(double(a) - double(b)), tol) << p << i;
      }
    }
  std::printf("[ UniPC    ] lambdas identical to torch's: %d of %d\n", same, total);
  EXPECT_GT(same, total / 2);
}

// With torch's lambdas every step of every case is bit-identical to Diffusers (f32, bf16 model output
// with f32 latents as in WanPipeline, all-bf16, bh1/bh2, sigma_min/zero, disable_corrector, orders 1-2).
// solver_order 3 (a 3x3 MKL solve and a K=2 einsum whose op order diffq does not reproduce) is within
// 1e-6 relative instead.
TEST(UniPC, StepsBitExactGivenTorchLambdas) {
  int steps = 0;
  for (const auto& [name, c] : cases().items())
    for (int64_t n : c["steps"].get<std::vector<int64_t>>()) {
      SCOPED_TRACE(name + " n=" + std::to_string(n));
      const Replay r = replay(name, n, true);
      if (c["config"].value("solver_order", 2) == 3) {
        EXPECT_LE(r.max_rel, 1e-6);
      } else {
        EXPECT_EQ(r.inexact_steps, 0) << "max rel " << r.max_rel;
      }
      steps += r.steps;
    }
  EXPECT_GT(steps, 250);
}

// diffq's own lambdas: float32 outputs within 1e-6 relative of Diffusers' (1-ulp log differences).
TEST(UniPC, StepsCloseWithOwnLambdas) {
  int exact = 0, total = 0;
  for (const auto& [name, c] : cases().items())
    for (int64_t n : c["steps"].get<std::vector<int64_t>>()) {
      SCOPED_TRACE(name + " n=" + std::to_string(n));
      const Replay r = replay(name, n, false);
      const bool bf16_sample = c["sample_dtype"] == "bfloat16";
      EXPECT_LE(r.max_rel, bf16_sample ? 1e-2 : 1e-6);
      exact += r.steps - r.inexact_steps;
      total += r.steps;
    }
  std::printf("[ UniPC    ] steps bit-identical with diffq's own lambdas: %d of %d\n", exact, total);
}

TEST(UniPC, ConfigAndErrors) {
  auto def = UniPCMultistepConfig::from_json(diffq::io::JsonConfig(nlohmann::json::object(), "x"));
  EXPECT_EQ(def.num_train_timesteps, 1000);
  EXPECT_EQ(def.solver_order, 2);
  EXPECT_EQ(def.prediction_type, "epsilon");
  EXPECT_TRUE(def.predict_x0);
  EXPECT_EQ(def.solver_type, "bh2");
  EXPECT_TRUE(def.lower_order_final);
  EXPECT_FALSE(def.use_flow_sigmas);
  EXPECT_EQ(def.flow_shift, 1.0);
  EXPECT_EQ(def.final_sigmas_type, "zero");
  // Wan2.1's scheduler_config.json (unknown keys ignored).
  auto wan = UniPCMultistepConfig::from_json(diffq::io::JsonConfig(
      nlohmann::json::parse(R"({"_class_name": "UniPCMultistepScheduler", "_diffusers_version": "0.33.0",
        "beta_end": 0.02, "beta_schedule": "linear", "beta_start": 0.0001, "disable_corrector": [],
        "dynamic_thresholding_ratio": 0.995, "final_sigmas_type": "zero", "flow_shift": 3.0,
        "lower_order_final": true, "num_train_timesteps": 1000, "predict_x0": true,
        "prediction_type": "flow_prediction", "rescale_betas_zero_snr": false, "sample_max_value": 1.0,
        "solver_order": 2, "solver_p": null, "solver_type": "bh2", "steps_offset": 0,
        "thresholding": false, "timestep_spacing": "linspace", "trained_betas": null,
        "use_beta_sigmas": false, "use_exponential_sigmas": false, "use_flow_sigmas": true,
        "use_karras_sigmas": false})"),
      "scheduler_config.json"));
  EXPECT_EQ(wan.flow_shift, 3.0);
  EXPECT_TRUE(wan.use_flow_sigmas);
  EXPECT_FALSE(wan.has_trained_betas);
  auto midpoint = UniPCMultistepConfig::from_json(diffq::io::JsonConfig({{"solver_type", "midpoint"}}, "x"));
  EXPECT_EQ(midpoint.solver_type, "bh2");
  EXPECT_THROW(UniPCMultistepConfig::from_json(diffq::io::JsonConfig({{"solver_type", "dpm"}}, "x")),
               diffq::Error);
  EXPECT_THROW(UniPCMultistepConfig::from_json(diffq::io::JsonConfig({{"final_sigmas_type", "one"}}, "x")),
               diffq::Error);
  // Not implemented: the beta-schedule path, karras sigmas, thresholding.
  UniPCMultistepScheduler beta(def);
  try {
    beta.set_timesteps(10);
    ADD_FAILURE() << "non-flow path accepted";
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("use_flow_sigmas"), std::string::npos) << e.what();
  }
  UniPCMultistepConfig k = wan;
  k.use_karras_sigmas = true;
  EXPECT_THROW(UniPCMultistepScheduler(k).set_timesteps(10), diffq::Error);
  UniPCMultistepConfig d = wan;
  d.use_dynamic_shifting = true;
  EXPECT_THROW(UniPCMultistepScheduler(d).set_timesteps(10), diffq::Error);  // mu required
  UniPCMultistepScheduler s(wan);
  EXPECT_THROW(s.step(Tensor::zeros({2}, diffq::DType::f32), 999, Tensor::zeros({2}, diffq::DType::f32)),
               diffq::Error);  // set_timesteps first
  s.set_timesteps(2);
  EXPECT_THROW(s.set_lambdas({1.0f}), diffq::Error);
  EXPECT_EQ(s.index_for_timestep(s.timesteps()[1]), 1);
  EXPECT_EQ(s.index_for_timestep(12345), 1);  // not found: the last index
  EXPECT_THROW(s.step(Tensor::zeros({2}, diffq::DType::f32), 0, Tensor::zeros({3}, diffq::DType::f32)),
               diffq::Error);
}

// WanPipeline with FlowMatchEulerDiscreteScheduler(shift=7.0) (Diffusers' tiny Wan tests) calls
// set_timesteps(N) without sigmas or mu: diffq's existing scheduler reproduces it bit for bit.
TEST(UniPC, FlowMatchEulerShift7AsWanCallsIt) {
  const auto& f = schedules_file();
  for (int64_t n : {1, 2, 3, 4, 10, 50}) {
    SCOPED_TRACE(n);
    diffq::FlowMatchEulerDiscreteConfig c;
    c.shift = 7.0;
    diffq::FlowMatchEulerDiscreteScheduler s(c);
    s.set_timesteps(n);
    const std::string p = "fme7.n" + std::to_string(n) + ".";
    EXPECT_EQ(bits_of(s.sigmas()), bits_of(f.tensor(p + "sigmas").to_f32_vector()));
    EXPECT_EQ(bits_of(s.timesteps()), bits_of(f.tensor(p + "timesteps").to_f32_vector()));
  }
}

}  // namespace
