// UniPC configs that break down at a step in Diffusers 0.42.1 (NaN latents, or torch.linalg.solve raising on
// a singular system): diffq refuses at that same step with an error, and runs the neighbouring configs that
// stay finite (tests/fixtures/unipc-refusals/, made by tools/reference/make_unipc_refusals.py; found by
// tools/reference/crosscheck_wan.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/error.h"
#include "schedulers/unipc_multistep.h"

namespace {

using diffq::Tensor;

// Finite pseudo-random values in [-2, 2) (the outcome depends on the schedule, not on the values).
Tensor noise(uint32_t& state, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    x = float(state >> 8) / float(1 << 24) * 4.0f - 2.0f;
  }
  return Tensor::from_vector(v, {1, 4, 2, 3, 3}, diffq::DType::f32);
}

bool all_finite(const Tensor& t) {
  for (float x : t.to_f32_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

TEST(UniPCRefusals, RefusesWhereDiffusersGivesNaNOrRaises) {
  std::ifstream in(DIFFQ_SOURCE_DIR "/tests/fixtures/unipc-refusals/cases.json");
  ASSERT_TRUE(in.good());
  const auto cases = nlohmann::json::parse(in);
  int refusals = 0, finite = 0;
  for (const auto& c : cases) {
    const int64_t n = c["steps"].get<int64_t>();
    const std::string outcome = c["outcome"].get<std::string>();
    const int64_t bad_step = outcome == "ok" ? -1 : c["step"].get<int64_t>();
    SCOPED_TRACE(c["config"].dump() + " n=" + std::to_string(n) + " Diffusers: " + outcome);
    diffq::UniPCMultistepScheduler s(
        diffq::UniPCMultistepConfig::from_json(diffq::io::JsonConfig(c["config"], "cases.json")));
    s.set_timesteps(n);
    s.set_begin_index(0);
    uint32_t state = 12345;
    Tensor x = noise(state, 72);
    for (int64_t i = 0; i < n; ++i) {
      const Tensor mo = noise(state, 72);
      if (i == bad_step) {
        try {
          s.step(mo, s.timesteps()[size_t(i)], x);
          ADD_FAILURE() << "step " << i << " ran; Diffusers: " << outcome;
        } catch (const diffq::Error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find(outcome == "raises" ? "singular" : "non-finite"), std::string::npos) << what;
          EXPECT_NE(what.find("step " + std::to_string(i)), std::string::npos) << what;
          ++refusals;
        }
        break;
      }
      ASSERT_NO_THROW(x = s.step(mo, s.timesteps()[size_t(i)], x)) << "step " << i;
      ASSERT_TRUE(all_finite(x)) << "step " << i;
      if (i == n - 1) ++finite;
    }
  }
  EXPECT_GE(refusals, 10);
  EXPECT_GE(finite, 10);
}

}  // namespace
