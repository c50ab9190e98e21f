// diffq's CPU sdpa against torch 2.15 on fully masked rows (float -inf and boolean masks), a fully
// masked head, no keys, and ordinary rows beside them: torch returns 0 where every key is masked.
#include "common/sdpa_torch_cases.h"

TEST(SdpaVsTorch, FullyMaskedRowsAreZeroAsTorchOnTheCpu) { diffq::testing::expect_sdpa_matches_torch(diffq::Device::cpu()); }
