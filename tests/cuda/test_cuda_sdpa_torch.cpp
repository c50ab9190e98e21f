// The CUDA sdpa against torch 2.15 on fully masked rows, a fully masked head, no keys and ordinary rows
// (the same fixture as tests/ops/test_sdpa_torch.cpp).
#include "common/sdpa_torch_cases.h"
#include "gpu_test.h"

TEST(CudaSdpaVsTorch, FullyMaskedRowsAreZeroAsTorch) {
  DIFFQ_REQUIRE_GPU();
  diffq::testing::expect_sdpa_matches_torch(diffq::cudatest::gpu());
}
