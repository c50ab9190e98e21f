// FlowMatchEulerDiscreteScheduler against Diffusers 0.42.1 (tests/fixtures/tiny-flux*/reference/).
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

// Reference values printed by Diffusers 0.42.1 / torch 2.15 (FlowMatchEulerDiscreteScheduler(**config)
// .set_timesteps(...), float32 bits) for options the Flux fixtures do not reach. 5 steps; "sigmas"
// cases pass np.linspace(1.0, 0.2, 5); mu = 0.8.
struct ScheduleCase {
  const char* name;
  std::vector<uint32_t> sigmas, timesteps;
};

TEST(FlowMatchEuler, OtherOptionsMatchDiffusersBitExact) {
  const std::vector<ScheduleCase> cases = {
      {"static3_default", {0x3f800000, 0x3f667def, 0x3f404979, 0x3f00c3a1, 0x3c124925, 0x00000000},
          {0x447a0000, 0x446116fb, 0x443bc7c0, 0x43fb7e16, 0x410edb6e}},
      {"static3_sigmas", {0x3f800000, 0x3f6c4ec6, 0x3f51745d, 0x3f2aaaab, 0x3edb6db8, 0x00000000},
          {0x447a0000, 0x4466c4ed, 0x444c8ba3, 0x4426aaab, 0x43d64926}},
      {"dyn_default", {0x3f800000, 0x3f5eb0d0, 0x3f30be32, 0x3eda8f3e, 0x3b11acae, 0x00000000},
          {0x447a0000, 0x445978ab, 0x442c99bd, 0x43d56fe3, 0x400e42a2}},
      {"linear_sigmas", {0x3f800000, 0x3f430c32, 0x3f0ba2e9, 0x3eb21643, 0x3e2aaaaa, 0x00000000},
          {0x447a0000, 0x443e79e9, 0x44085d18, 0x43ade9bd, 0x4326aaaa}},
      {"terminal", {0x3f800000, 0x3f60fc11, 0x3f36b0df, 0x3ef33334, 0x3dccccd0, 0x00000000},
          {0x447a0000, 0x445bb629, 0x443268ba, 0x43ed8001, 0x42c80003}},
      {"karras", {0x3f800000, 0x3eccf6f2, 0x3e0ef312, 0x3d255dda, 0x3c124925, 0x00000000},
          {0x447a0000, 0x43c82928, 0x430b9960, 0x42217da7, 0x410edb6e}},
      {"exponential", {0x3f800000, 0x3e9d62c2, 0x3dc1848f, 0x3cedf1e6, 0x3c124925, 0x00000000},
          {0x447a0000, 0x4399b271, 0x42bcfb74, 0x41e85e3b, 0x410edb6e}},
      {"invert", {0x00000000, 0x3de38e30, 0x3e800000, 0x3edb6db6, 0x3f2aaaab, 0x3f800000},
          {0x00000000, 0x42de38db, 0x437a0000, 0x43d64924, 0x4426aaab}},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    SCOPED_TRACE(name);
    FlowMatchEulerDiscreteConfig cfg;
    diffq::SetTimestepsOptions o;
    if (name.find("sigmas") != std::string::npos || name == "terminal" || name == "invert")
      o.sigmas = diffq::np_linspace(1.0, 0.2, 5);
    if (name.rfind("static3", 0) == 0) cfg.shift = 3.0;
    if (name == "dyn_default" || name == "linear_sigmas") {
      cfg.use_dynamic_shifting = true;
      o.mu = 0.8;
    }
    if (name == "linear_sigmas") cfg.time_shift_type = "linear";
    if (name == "terminal") {
      cfg.shift = 3.0;
      cfg.shift_terminal = 0.1;
    }
    if (name == "karras" || name == "exponential") cfg.shift = 3.0;
    cfg.use_karras_sigmas = name == "karras";
    cfg.use_exponential_sigmas = name == "exponential";
    if (name == "invert") {
      cfg.shift = 2.0;
      cfg.invert_sigmas = true;
    }
    FlowMatchEulerDiscreteScheduler s(cfg);
    s.set_timesteps(5, o);
    EXPECT_EQ(bits_of(s.sigmas()), c.sigmas);
    EXPECT_EQ(bits_of(s.timesteps()), c.timesteps);
  }
}

// step() with a bfloat16 model output: torch computes dt * v in bfloat16 (dt rounded to bf16, the
// product rounded to bf16) and adds it to the float32 sample. Reference: Diffusers 0.42.1 with
// v = randn(64, generator seed 1).to(bf16), x = the next randn(64) (float32), use_dynamic_shifting,
// sigmas = linspace(1, 0.25, 4), mu = 0.7, step at timesteps[0].
TEST(FlowMatchEuler, Bf16StepRoundsTheProductLikeTorch) {
  diffq::Generator g(1);
  Tensor v = diffq::randn({64}, g).to(diffq::DType::bf16);
  Tensor x = diffq::randn({64}, g);
  FlowMatchEulerDiscreteConfig cfg;
  cfg.use_dynamic_shifting = true;
  FlowMatchEulerDiscreteScheduler s(cfg);
  diffq::SetTimestepsOptions o;
  o.sigmas = diffq::np_linspace(1.0, 0.25, 4);
  o.mu = 0.7;
  s.set_timesteps(std::nullopt, o);
  Tensor out = s.step(v, s.timesteps()[0], x);
  EXPECT_EQ(out.dtype(), diffq::DType::bf16);
  const std::vector<uint32_t> want = {0x3e430000, 0xbf6b0000, 0xbf010000, 0xbf470000, 0xbe490000,
      0x3da20000, 0x3fe80000, 0x3e740000, 0xbf1a0000, 0xbe6a0000, 0xbf630000, 0xbf4c0000,
      0xbedc0000, 0xbf4d0000, 0x3eba0000, 0xbf860000, 0xbed10000, 0x3e880000, 0xbf410000,
      0x3f340000, 0xbfc70000, 0xbf090000, 0x3e880000, 0xbe8c0000, 0x3dc90000, 0xbef40000,
      0xbf390000, 0x3f700000, 0xbf870000, 0xbec40000, 0x3ecf0000, 0x40010000, 0x3eca0000,
      0x3f9a0000, 0x3f4b0000, 0xbf4e0000, 0x3fae0000, 0xbf520000, 0xbf730000, 0x3f970000,
      0x3fad0000, 0x3f100000, 0xbda60000, 0xbe170000, 0xc01c0000, 0xbef20000, 0xbfda0000,
      0xbf860000, 0x3f810000, 0xbf230000, 0x3fa30000, 0x3f610000, 0x3dc70000, 0x3e780000,
      0x3ebe0000, 0xbf370000, 0x40220000, 0xbebb0000, 0x3c510000, 0x3ffa0000, 0xc00d0000,
      0x3ff60000, 0x3f130000, 0x3ee40000};
  EXPECT_EQ(bits_of(out.to_f32_vector()), want);
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
