// The FLUX single block's eager path gives the bits of the general one: it writes its MLP and attention heads
// into one buffer for proj_out (Linear::forward_into, copy_into) where the general path concatenates them. The
// reference is the same model on its general path, which a pass-through attention hook selects (as a step
// cache's hook does); bf16 (packed weights, written in place) and f32 (dense weights, copied in), batch 1 and 2.
// (q / k's rms_norm_rope against the ops it replaces: tests/ops/test_rms_norm_rope.cpp.)
#include <gtest/gtest.h>

#include "common/random_tensor.h"
#include "modules/random_init.h"
#include "small_flux.h"

using namespace diffq;
using namespace diffq::models::flux;
using diffq::testing::randn;

namespace {

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

}  // namespace

TEST(FluxEagerPaths, SingleBlockWritingIntoOneBufferKeepsTheBits) {
  for (const DType dt : {DType::bf16, DType::f32})
    for (const int64_t B : {int64_t(1), int64_t(2)}) {
      FluxTransformer2DModel model(diffq::testing::small_flux_config());
      init_parameters_randn(model, dt, 11);
      const int64_t T = 8, N = 16;
      std::vector<float> ids;
      for (int64_t i = 0; i < N; ++i) ids.insert(ids.end(), {0.f, float(i / 4), float(i % 4)});
      const auto run = [&] {
        return model(randn({B, N, 16}, 1, dt), randn({B, T, 64}, 2, dt), randn({B, 32}, 3, dt),
                     Tensor::full({B}, 0.75, dt), Tensor::full({B}, 0.0035, DType::f32), Tensor::zeros({T, 3}, DType::f32),
                     Tensor::from_vector(ids, {N, 3}));
      };
      const Tensor fast = run();
      // The general path: every attention module hooked by a pass-through (the step caches' hook point).
      const auto pass = [](int64_t, const std::function<std::vector<Tensor>()>& compute) { return compute(); };
      for (auto& b : model.transformer_blocks) b->attn.output_hook = pass;
      for (auto& b : model.single_transformer_blocks) b->attn.output_hook = pass;
      const Tensor general = run();
      EXPECT_EQ(bytes(fast), bytes(general)) << dtype_name(dt) << ", B " << B;
    }
}
