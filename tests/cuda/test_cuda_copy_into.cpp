// ops::copy_into onto a strided device view (the Wan VAE writes each decoded frame range into a
// preallocated [B, C, F, H, W] video through such views): same dtype and with a cast, against the CPU.
#include <gtest/gtest.h>

#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;

namespace {

TEST(CudaCopyInto, StridedOutputViewsMatchTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (const DType src_dt : {DType::f32, DType::bf16}) {
    const Tensor v = random_values({3, 2, 5, 6}, src_dt, 11);  // [F, C, H, W]
    Tensor cpu_out = Tensor::zeros({1, 2, 7, 5, 6}, DType::f32);  // [B, C, F, H, W]
    Tensor gpu_out = cpu_out.to(gpu());
    // out[0, :, 2:5] = v.permute(C, F, H, W): a strided view of the output, written in place.
    ops::copy_into(v.permute({1, 0, 2, 3}), cpu_out.select(0, 0).slice(1, 2, 5));
    ops::copy_into(v.to(gpu()).permute({1, 0, 2, 3}), gpu_out.select(0, 0).slice(1, 2, 5));
    EXPECT_EQ(bytes_of(gpu_out.to(Device::cpu())), bytes_of(cpu_out)) << dtype_name(src_dt);
    // A transposed (last stride != 1) output view: only the CUDA kernel takes it.
    Tensor t = Tensor::zeros({6, 5}, src_dt, gpu());
    const Tensor w = random_values({5, 6}, src_dt, 12);
    ops::copy_into(w.to(gpu()), t.transpose(0, 1));
    EXPECT_EQ(bytes_of(t.to(Device::cpu())), bytes_of(w.transpose(0, 1).contiguous())) << dtype_name(src_dt);
  }
}

}  // namespace
