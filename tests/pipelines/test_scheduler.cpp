// FlowMatchEulerDiscreteScheduler against Diffusers 0.42.1 (tests/fixtures/tiny-flux*/reference/, reference-values/).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/error.h"
#include "io/safetensors.h"
#include "core/random.h"
#include "schedulers/flow_match_euler.h"

namespace {

using diffq::FlowMatchEulerDiscreteConfig;
using diffq::FlowMatchEulerDiscreteScheduler;
using diffq::Tensor;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST(FlowMatchEuler, ConfigFromFixtureFolders) {
  auto dev = FlowMatchEulerDiscreteConfig::from_file(kFix + "tiny-flux/scheduler/scheduler_config.json");
  EXPECT_TRUE(dev.use_dynamic_shifting);
  EXPECT_EQ(dev.shift, 3.0);
  EXPECT_EQ(dev.base_shift, 0.5);
  EXPECT_EQ(dev.max_shift, 1.15);
  EXPECT_EQ(dev.base_image_seq_len, 256);
  EXPECT_EQ(dev.max_image_seq_len, 4096);
  EXPECT_EQ(dev.time_shift_type, "exponential");
  auto sch = FlowMatchEulerDiscreteConfig::from_file(kFix +
                                                     "tiny-flux-schnell/scheduler/scheduler_config.json");
  EXPECT_FALSE(sch.use_dynamic_shifting);
  EXPECT_EQ(sch.shift, 1.0);
  // Missing keys: Diffusers' defaults.
  auto def = FlowMatchEulerDiscreteConfig::from_json(diffq::io::JsonConfig(nlohmann::json::object(), "x"));
  EXPECT_EQ(def.num_train_timesteps, 1000);
  EXPECT_FALSE(def.shift_terminal.has_value());
  EXPECT_THROW(FlowMatchEulerDiscreteConfig::from_json(
                   diffq::io::JsonConfig(nlohmann::json{{"time_shift_type", "cubic"}}, "x")),
               diffq::Error);
  EXPECT_THROW(FlowMatchEulerDiscreteConfig::from_file(kFix + "does/not/exist.json"), diffq::Error);
}

TEST(FlowMatchEuler, EveryFixtureScheduleBitExact) {
  auto ref = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/scheduler.safetensors");
  std::ifstream pin(kFix + "tiny-flux/reference/params.json");
  const auto params = nlohmann::json::parse(pin)["scheduler"];
  int checked = 0;
  for (const auto& [key, p] : params.items()) {
    SCOPED_TRACE(key);
    const bool dev = key.rfind("dev.", 0) == 0;
    auto cfg = FlowMatchEulerDiscreteConfig::from_file(
        kFix + (dev ? "tiny-flux" : "tiny-flux-schnell") + "/scheduler/scheduler_config.json");
    const int64_t n = p["num_inference_steps"], seq = p["image_seq_len"];
    const double mu = diffq::calculate_shift(seq, cfg.base_image_seq_len, cfg.max_image_seq_len,
                                             cfg.base_shift, cfg.max_shift);
    EXPECT_EQ(mu, p["mu"].get<double>());  // float64, exact
    FlowMatchEulerDiscreteScheduler s(cfg);
    s.set_timesteps(n, {.sigmas = diffq::flux_default_sigmas(n), .mu = mu, .timesteps = {}});
    const auto want_s = ref.tensor(key + ".sigmas").to_f32_vector();
    const auto want_t = ref.tensor(key + ".timesteps").to_f32_vector();
    EXPECT_EQ(bits_of(s.sigmas()), bits_of(want_s));
    EXPECT_EQ(bits_of(s.timesteps()), bits_of(want_t));
    EXPECT_EQ(s.sigmas().back(), 0.0f);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST(FlowMatchEuler, GenerateStepsBitExact) {
  for (const char* folder : {"tiny-flux", "tiny-flux-schnell"}) {
    SCOPED_TRACE(folder);
    auto gen = diffq::io::SafetensorsFile::open(kFix + folder + "/reference/generate.safetensors");
    auto cfg = FlowMatchEulerDiscreteConfig::from_file(kFix + folder + "/scheduler/scheduler_config.json");
    FlowMatchEulerDiscreteScheduler s(cfg);
    const int64_t n = 2, seq = 64;
    s.set_timesteps(n, {.sigmas = diffq::flux_default_sigmas(n),
                        .mu = diffq::calculate_shift(seq, cfg.base_image_seq_len, cfg.max_image_seq_len,
                                                     cfg.base_shift, cfg.max_shift),
                        .timesteps = {}});
    s.set_begin_index(0);
    for (int i = 0; i < n; ++i) {
      const std::string p = "step" + std::to_string(i);
      // The transformer gets t / 1000 (float32): the scheduler's timestep divided back.
      EXPECT_EQ(s.timesteps()[size_t(i)] / 1000.0f, gen.tensor(p + ".timestep").item());
      Tensor out = s.step(gen.tensor(p + ".noise_pred"), s.timesteps()[size_t(i)],
                          gen.tensor(p + ".latents_in"));
      EXPECT_EQ(bits_of(out.to_f32_vector()), bits_of(gen.tensor(p + ".latents_out").to_f32_vector()));
    }
    EXPECT_EQ(s.step_index().value(), 2);
    EXPECT_THROW(s.step(gen.tensor("step0.noise_pred"), 0.0f, gen.tensor("step0.latents_in")),
                 diffq::Error);
  }
}

TEST(FlowMatchEuler, StaticShiftAndDefaults) {
  FlowMatchEulerDiscreteConfig cfg;
  cfg.shift = 3.0;
  FlowMatchEulerDiscreteScheduler s(cfg);
  EXPECT_EQ(s.sigma_max(), 1.0f);
  s.set_timesteps(4);  // float64 default path
  ASSERT_EQ(s.sigmas().size(), 5u);
  EXPECT_EQ(s.sigmas()[0], 1.0f);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.timesteps()[i], s.sigmas()[i] * 1000.0f);
    if (i) {
      EXPECT_LT(s.sigmas()[i], s.sigmas()[i - 1]);
    }
  }
  // sigma' = 3 s / (1 + 2 s), within float rounding of the float64 formula.
  const double sm = s.sigma_min();
  const double t = (1000.0 * 1.0 + 2.0 / 3.0 * (sm * 1000.0 - 1000.0)) / 1000.0;
  EXPECT_NEAR(s.sigmas()[2], 3 * t / (1 + 2 * t), 1e-7);
  diffq::SetTimestepsOptions two;
  two.sigmas = std::vector<double>{1.0, 0.5};
  EXPECT_THROW(s.set_timesteps(3, two), diffq::Error);
  FlowMatchEulerDiscreteConfig dyn;
  dyn.use_dynamic_shifting = true;
  FlowMatchEulerDiscreteScheduler d(dyn);
  EXPECT_THROW(d.set_timesteps(4), diffq::Error);  // mu required
}

TEST(FlowMatchEuler, Linspace) {
  EXPECT_EQ(diffq::np_linspace(1.0, 0.25, 4), (std::vector<double>{1.0, 0.75, 0.5, 0.25}));
  EXPECT_EQ(diffq::np_linspace(2.0, 5.0, 1), std::vector<double>{2.0});
  EXPECT_TRUE(diffq::np_linspace(0, 1, 0).empty());
}

// Small reference values made by tools/reference/make_reference_values.py with Diffusers 0.42.1 / torch 2.15
// (tests/fixtures/reference-values: values.safetensors, params.json has each call).
const diffq::io::SafetensorsFile& values() {
  static const auto f = diffq::io::SafetensorsFile::open(kFix + "reference-values/values.safetensors");
  return f;
}
const nlohmann::json& value_params() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFix + "reference-values/params.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

// FlowMatchEulerDiscreteScheduler(**config).set_timesteps(**call) for options the Flux fixtures do not reach
// (static shift, Karras / exponential sigmas, shift_terminal, linear time shift, invert_sigmas): the config
// holds only the keys Diffusers was given, so its defaults are diffq's defaults too.
diffq::SetTimestepsOptions timesteps_options(const nlohmann::json& call) {
  diffq::SetTimestepsOptions o;
  if (call.contains("sigmas")) o.sigmas = call["sigmas"].get<std::vector<double>>();
  if (call.contains("mu")) o.mu = call["mu"].get<double>();
  return o;
}

TEST(FlowMatchEuler, OtherOptionsMatchDiffusersBitExact) {
  int checked = 0;
  for (const auto& [name, c] : value_params().at("scheduler").items()) {
    SCOPED_TRACE(name);
    const auto cfg = FlowMatchEulerDiscreteConfig::from_json(diffq::io::JsonConfig(c.at("config"), name));
    const nlohmann::json& call = c.at("set_timesteps");
    FlowMatchEulerDiscreteScheduler s(cfg);
    s.set_timesteps(call.contains("num_inference_steps") ? std::optional<int64_t>(call["num_inference_steps"].get<int64_t>())
                                                         : std::nullopt,
                    timesteps_options(call));
    EXPECT_EQ(bits_of(s.sigmas()), bits_of(values().tensor("scheduler." + name + ".sigmas").to_f32_vector()));
    EXPECT_EQ(bits_of(s.timesteps()), bits_of(values().tensor("scheduler." + name + ".timesteps").to_f32_vector()));
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// step() with a bfloat16 model output: torch computes dt * v in bfloat16 (dt rounded to bf16, the product
// rounded to bf16) and adds it to the float32 sample; the result is bf16. Inputs, call and output from the
// fixture (model_output = torch.randn(64, seed 1).to(bf16), sample = the next randn(64)).
TEST(FlowMatchEuler, Bf16StepRoundsTheProductLikeTorch) {
  const nlohmann::json& p = value_params().at("bf16_step");
  const Tensor v = values().tensor("bf16_step.model_output"), x = values().tensor("bf16_step.sample");
  ASSERT_EQ(v.dtype(), diffq::DType::bf16);
  ASSERT_EQ(x.dtype(), diffq::DType::f32);
  FlowMatchEulerDiscreteScheduler s(FlowMatchEulerDiscreteConfig::from_json(diffq::io::JsonConfig(p.at("config"), "bf16_step")));
  s.set_timesteps(std::nullopt, timesteps_options(p.at("set_timesteps")));
  Tensor out = s.step(v, s.timesteps()[0], x);
  const Tensor want = values().tensor("bf16_step.prev_sample");
  EXPECT_EQ(out.dtype(), diffq::DType::bf16);
  EXPECT_EQ(bits_of(out.to_f32_vector()), bits_of(want.to_f32_vector()));
  // The fixture's inputs are also what diffq's generator draws for that seed.
  diffq::Generator g(1);
  EXPECT_EQ(bits_of(diffq::randn({64}, g).to(diffq::DType::bf16).to_f32_vector()), bits_of(v.to_f32_vector()));
  EXPECT_EQ(bits_of(diffq::randn({64}, g).to_f32_vector()), bits_of(x.to_f32_vector()));
}

// shift_terminal stretches by 1 / (1 - last sigma): with one step (sigmas [1.0]) that is 0 / 0 and
// Diffusers returns NaN sigmas (found by tools/reference/crosscheck_flux.py); diffq says why instead.
// Two steps still work (covered bit-exact above).
TEST(FlowMatchEuler, ShiftTerminalWithALastSigmaOfOneIsAClearError) {
  for (const bool dynamic : {false, true}) {
    FlowMatchEulerDiscreteConfig cfg;
    cfg.shift_terminal = 0.1;
    cfg.use_dynamic_shifting = dynamic;
    FlowMatchEulerDiscreteScheduler s(cfg);
    diffq::SetTimestepsOptions o;
    if (dynamic) o.mu = 0.8;
    for (const bool custom : {false, true}) {
      if (custom) o.sigmas = std::vector<double>{1.0};
      try {
        s.set_timesteps(custom ? std::nullopt : std::optional<int64_t>(1), o);
        ADD_FAILURE() << "expected an error (dynamic " << dynamic << ", custom " << custom << ")";
      } catch (const diffq::Error& e) {
        EXPECT_NE(std::string(e.what()).find("shift_terminal"), std::string::npos) << e.what();
      }
    }
    o.sigmas.reset();
    EXPECT_NO_THROW(s.set_timesteps(2, o));
    for (float x : s.sigmas()) EXPECT_TRUE(std::isfinite(x));
  }
}

}  // namespace
