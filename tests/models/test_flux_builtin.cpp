// The builtin FLUX configurations of diffq bench: their parameter counts equal those of Diffusers'
// FluxTransformer2DModel built from the same config (the peer script's BUILTIN table), counted with
// Diffusers 0.42.1 on the meta device; an unknown name is an error listing the known ones.
#include <gtest/gtest.h>

#include <string>

#include "diffq/error.h"
#include "models/flux/flux_builtin.h"

namespace {

using namespace diffq::models::flux;

int64_t parameter_count(const FluxTransformerConfig& c) {
  FluxTransformer2DModel m(c);  // parameters have shapes, no storage yet
  int64_t n = 0;
  for (const auto& p : m.named_parameters()) {
    int64_t e = 1;
    for (const int64_t d : p.second->shape()) e *= d;
    n += e;
  }
  return n;
}

TEST(FluxBuiltin, ParameterCountsEqualDiffusers) {
  EXPECT_EQ(parameter_count(builtin_flux("flux-small").transformer), 163059264);
  EXPECT_EQ(parameter_count(builtin_flux("flux-medium").transformer), 559837760);  // 1.12 GB in bf16
  EXPECT_EQ(builtin_flux("flux-small").text_tokens, 128);
  EXPECT_EQ(builtin_flux("flux-medium").text_tokens, 128);
  EXPECT_EQ(builtin_flux("flux-dev-shape").text_tokens, 512);
  // FluxTransformer2DModel(num_layers=1, num_single_layers=2, 24 x 128 heads, axes (16, 56, 56),
  // guidance_embeds=True) on torch's meta device: 687139904 parameters.
  EXPECT_EQ(parameter_count(builtin_flux("flux-dev-width").transformer), 687139904);
  EXPECT_EQ(builtin_flux("flux-dev-width").text_tokens, 256);
}

TEST(FluxBuiltin, UnknownNameListsTheKnownOnes) {
  try {
    builtin_flux("flux-huge");
    FAIL() << "no error";
  } catch (const diffq::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("flux-huge"), std::string::npos) << m;
    EXPECT_NE(m.find("flux-medium"), std::string::npos) << m;
  }
}

}  // namespace
