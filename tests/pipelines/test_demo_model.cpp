// The demo model (models/demo-flux, trained by tools/train_demo, issue 22) draws what it is asked: the judge's
// 20 fixed prompts and seeds (models/demo-flux-classifier/adherence_prompts.json) generated at the folder's
// defaults (generation_defaults.json: 64x64, 20 steps, true CFG) and read back by the judge
// (include/diffq/adherence.h), for the float32 and bfloat16 models and each quantization scheme.
// The shipped weights (session 13, models/demo-flux/README.md) get the background, colour and position of most
// prompts right, shape and count of about two thirds, so 8 of 20 prompts are right in all four attributes (float32).
// Required per scheme: at least 6 of 20 right in all four AND at least 60 of the 80 attributes (colour + shape +
// count + position over the 20 prompts). Measured: 8-9 right, 64-66 attributes for every scheme below; chance is
// ~17 attributes; the same model without its true CFG scores 3 right / 51, and session 12's weights 4-5 / 53-57,
// so losing CFG or going back to the old weights fails both bounds.
// Issue 22 asks for most prompts right in all four: not met yet.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "diffq/adherence.h"
#include "diffq/pipeline.h"
#include "diffq/quantization.h"

namespace {
const std::string kModel = DIFFQ_SOURCE_DIR "/models/demo-flux";

struct Scheme {
  const char* name;
  diffq::DType dtype;
  const char* quant;  // a --quant shorthand on the transformer, "" none
  int64_t min_right;       // of 20, all four attributes
  int64_t min_attributes;  // of 80
};

class DemoAdherence : public ::testing::TestWithParam<Scheme> {};

TEST_P(DemoAdherence, DrawsMostPromptsRight) {
  const Scheme s = GetParam();
  diffq::PipelineOptions o;
  o.dtype = s.dtype;
  if (*s.quant) o.quantization_config_json = diffq::quantization_config_from_shorthand(s.quant, s.dtype, {"transformer"});
  auto pipe = diffq::DiffusionPipeline::from_pretrained(kModel, o);
  const auto judge = diffq::AdherenceJudge::load(diffq::AdherenceJudge::next_to(kModel));
  const diffq::AdherenceScore r = diffq::check_adherence(*pipe, *judge);
  std::printf("[demo %s] %lld/%lld right; colour %lld shape %lld count %lld position %lld\n", s.name, (long long)r.right,
              (long long)r.total, (long long)r.per_attribute.at("colour"), (long long)r.per_attribute.at("shape"),
              (long long)r.per_attribute.at("count"), (long long)r.per_attribute.at("position"));
  for (size_t i = 0; i < judge->prompts().size(); ++i)
    if (!r.row_right[i]) {
      std::string got;
      for (const auto& [k, v] : r.predicted[i]) got += k + "=" + v + " ";
      std::printf("  miss: '%s' seed %llu -> %s\n", judge->prompts()[i].prompt.c_str(),
                  (unsigned long long)judge->prompts()[i].seed, got.c_str());
    }
  EXPECT_EQ(r.total, 20);
  int64_t attributes = 0;
  for (const auto& [k, n] : r.per_attribute) attributes += n;
  EXPECT_GE(attributes, s.min_attributes) << s.name << ": attributes right of 80";
  EXPECT_GE(r.right, s.min_right) << s.name << ": prompts right in all four attributes of 20";
}

INSTANTIATE_TEST_SUITE_P(Schemes, DemoAdherence,
                         ::testing::Values(Scheme{"float32", diffq::DType::f32, "", 6, 60},
                                           Scheme{"bfloat16", diffq::DType::bf16, "", 6, 60},
                                           Scheme{"int8wo", diffq::DType::bf16, "int8wo", 6, 60},
                                           Scheme{"fp8wo", diffq::DType::bf16, "fp8wo", 6, 60},
                                           Scheme{"nf4", diffq::DType::bf16, "nf4", 6, 60},
                                           Scheme{"q8_0", diffq::DType::bf16, "q8_0", 6, 60},
                                           Scheme{"q4_0", diffq::DType::bf16, "q4_0", 6, 60},
                                           Scheme{"int4wo", diffq::DType::bf16, "int4wo", 6, 60}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
