// FluxTransformer2DModel::plan_steps (models/common/step_modulation_plan.h): a planned denoising loop gives
// the unplanned loop's bits while each AdaNorm's modulation linear runs once per window of steps and
// conditioning instead of once per call (counted by hooks on the linears). Covered: one window (B 1), windows
// of two steps (B 16: 32 rows a window), CFG's two conditionings interleaved, a timestep outside the plan,
// regional compile (the blocks' graphs compute their own modulation, norm_out takes the plan's), and clear.
#include <gtest/gtest.h>

#include <memory>

#include "common/random_tensor.h"
#include "small_flux.h"
#include "models/flux/flux_transformer.h"
#include "modules/random_init.h"

using namespace diffq;
using namespace diffq::models::flux;
using diffq::testing::bits16;
using diffq::testing::randn;

namespace {

struct CountCalls : ModuleHook {
  int64_t calls = 0;
  void pre_forward(Module&) override { ++calls; }
};

// small_flux.h's model, random bf16 weights, hooks counting the AdaNorms' linear calls.
struct StepPlanCase {
  explicit StepPlanCase(int64_t batch) : B(batch) {
    model = std::make_unique<FluxTransformer2DModel>(diffq::testing::small_flux_config());
    init_parameters_randn(*model, DType::bf16, 7);
    for (AdaNorm* n : {&model->transformer_blocks[0].norm1, &model->transformer_blocks[0].norm1_context,
                       &model->single_transformer_blocks[0].norm, &model->norm_out}) {
      counters.push_back(std::make_shared<CountCalls>());
      n->linear.add_hook(counters.back());
    }
    for (int cond = 0; cond < 2; ++cond) {
      encoder.push_back(randn({B, T, 64}, 10 + cond, DType::bf16));
      pooled.push_back(randn({B, 32}, 20 + cond, DType::bf16));
    }
    guidance = Tensor::full({B}, 3.5 / 1000.0, DType::f32);
    txt_ids = Tensor::zeros({T, 3}, DType::f32);
    std::vector<float> ids;
    for (int64_t i = 0; i < N; ++i) ids.insert(ids.end(), {0.f, float(i / 4), float(i % 4)});
    img_ids = Tensor::from_vector(ids, {N, 3}, DType::f32);
    for (const float t : {1.0f, 0.75f, 0.5f}) timesteps.push_back(Tensor::full({B}, t, DType::bf16));
  }
  // A loop over the steps, `conds` conditionings a step (CFG), each step's latents its own: every output.
  std::vector<Tensor> loop(int conds) {
    std::vector<Tensor> out;
    for (size_t i = 0; i < timesteps.size(); ++i)
      for (int c = 0; c < conds; ++c)
        out.push_back((*model)(randn({B, N, 16}, uint32_t(30 + i), DType::bf16), encoder[size_t(c)],
                               pooled[size_t(c)], timesteps[i], guidance, txt_ids, img_ids));
    return out;
  }
  std::vector<int64_t> calls_since(const std::vector<int64_t>& before) const {
    std::vector<int64_t> d;
    for (size_t i = 0; i < counters.size(); ++i) d.push_back(counters[i]->calls - before[i]);
    return d;
  }
  std::vector<int64_t> calls() const { return calls_since(std::vector<int64_t>(counters.size(), 0)); }

  const int64_t B, T = 8, N = 16;
  std::unique_ptr<FluxTransformer2DModel> model;
  std::vector<std::shared_ptr<CountCalls>> counters;  // norm1, norm1_context, the single block's norm, norm_out
  std::vector<Tensor> encoder, pooled, timesteps;
  Tensor guidance, txt_ids, img_ids;
};

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits16(a[i]), bits16(b[i])) << what << ", output " << i;
}

}  // namespace

TEST(FluxStepPlan, OneWindowRunsEachModulationLinearOncePerConditioning) {
  for (const int conds : {1, 2}) {
    StepPlanCase c(1);
    const std::vector<Tensor> unplanned = c.loop(conds);
    EXPECT_EQ(c.calls(), std::vector<int64_t>(4, 3 * conds));  // every call its own
    const std::vector<int64_t> before = c.calls();
    c.model->plan_steps(c.timesteps);
    expect_same_bits(c.loop(conds), unplanned, "planned, conditionings " + std::to_string(conds));
    EXPECT_EQ(c.calls_since(before), std::vector<int64_t>(4, conds));  // 3 steps, one window
    // A timestep outside the plan computes its own, with the unplanned values.
    const std::vector<int64_t> mid = c.calls();
    const Tensor other = Tensor::full({1}, 0.625f, DType::bf16);
    const Tensor hidden = randn({1, c.N, 16}, 99, DType::bf16);
    const Tensor planned_other = (*c.model)(hidden, c.encoder[0], c.pooled[0], other, c.guidance, c.txt_ids, c.img_ids);
    EXPECT_EQ(c.calls_since(mid), std::vector<int64_t>(4, 1));
    c.model->clear_step_plan();
    EXPECT_EQ(bits16(planned_other),
              bits16((*c.model)(hidden, c.encoder[0], c.pooled[0], other, c.guidance, c.txt_ids, c.img_ids)));
    // Cleared: every call computes its own again.
    const std::vector<int64_t> after = c.calls();
    expect_same_bits(c.loop(conds), unplanned, "after clear");
    EXPECT_EQ(c.calls_since(after), std::vector<int64_t>(4, 3 * conds));
  }
}

TEST(FluxStepPlan, WindowsOfSeveralStepsKeepTheBits) {
  StepPlanCase c(16);  // 32 rows a window: 2 steps, so the 3 steps take two windows
  const std::vector<Tensor> unplanned = c.loop(2);
  const std::vector<int64_t> before = c.calls();
  c.model->plan_steps(c.timesteps);
  expect_same_bits(c.loop(2), unplanned, "B 16, two conditionings");
  EXPECT_EQ(c.calls_since(before), std::vector<int64_t>(4, 2 * 2));  // 2 windows x 2 conditionings
}

TEST(FluxStepPlan, RegionalCompileKeepsTheBits) {
  StepPlanCase c(1);
  c.model->compile_repeated_blocks(compile::CompileOptions{});
  const std::vector<Tensor> unplanned = c.loop(1);
  c.model->plan_steps(c.timesteps);
  const std::vector<int64_t> before = c.calls();
  expect_same_bits(c.loop(1), unplanned, "regional compile");
  EXPECT_EQ(c.calls_since(before)[3], 1);  // norm_out (eager) from the plan: once for the window
  c.model->clear_step_plan();
  c.model->uncompile();
}
