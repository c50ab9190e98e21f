// The CUDA backend's foundation: the device allocator's accounting, copies between host and device
// (bit-exact for every dtype, any view) and casts that round exactly as the CPU does.
#include <cmath>
#include <limits>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;

TEST(CudaAllocator, CountsCurrentAndPeak) {
  DIFFQ_REQUIRE_GPU();
  EXPECT_EQ(allocator_for(gpu()).device(), gpu());
  reset_peak_memory_stats(gpu());
  const MemoryStats base = memory_stats(gpu());
  EXPECT_EQ(base.peak_bytes, base.current_bytes);
  {
    Tensor a = Tensor::empty({1024}, DType::f32, gpu());
    MemoryStats s = memory_stats(gpu());
    EXPECT_EQ(s.current_bytes, base.current_bytes + 4096);
    EXPECT_EQ(s.num_allocs, base.num_allocs + 1);
    {
      Tensor b = Tensor::empty({256}, DType::bf16, gpu());
      EXPECT_EQ(memory_stats(gpu()).current_bytes, base.current_bytes + 4096 + 512);
    }
    s = memory_stats(gpu());
    EXPECT_EQ(s.current_bytes, base.current_bytes + 4096);
    EXPECT_EQ(s.peak_bytes, base.current_bytes + 4096 + 512);
    reset_peak_memory_stats(gpu());
    EXPECT_EQ(memory_stats(gpu()).peak_bytes, base.current_bytes + 4096);
  }
  EXPECT_EQ(memory_stats(gpu()).current_bytes, base.current_bytes);
  // The CPU's accounting is separate.
  const int64_t cpu_before = memory_stats(Device::cpu()).current_bytes;
  Tensor c = Tensor::empty({100}, DType::f32, gpu());
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, cpu_before);
}

TEST(CudaAllocator, MissingDeviceIndexIsAClearError) {
  DIFFQ_REQUIRE_GPU();
  const int n = backend::cuda::device_count();
  try {
    Tensor::empty({4}, DType::f32, Device::cuda(n));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(n)), std::string::npos) << e.what();
    // "only 1 CUDA device is present (cuda:0)" / "only 2 CUDA devices are present (cuda:0..1)"
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("present"), std::string::npos) << e.what();
  }
}

TEST(CudaAllocator, OutOfMemoryIsAClearError) {
  DIFFQ_REQUIRE_GPU();
  try {
    Tensor::empty({int64_t(1) << 50}, DType::f32, gpu());  // 4 PiB
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
  // The failure leaves the device usable.
  EXPECT_EQ(Tensor::full({3}, 2.0, DType::f32, gpu()).to_f32_vector(), (std::vector<float>{2, 2, 2}));
}

TEST(CudaCopy, RoundTripIsBitExactForEveryDType) {
  DIFFQ_REQUIRE_GPU();
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Tensor x = random_bits({3, 5, 7}, dt, 100 + i);
    const Tensor on_gpu = x.to(gpu());
    EXPECT_EQ(on_gpu.device(), gpu());
    EXPECT_EQ(on_gpu.dtype(), dt);
    EXPECT_EQ(bytes_of(on_gpu.to(Device::cpu())), bytes_of(x));
    // cuda -> cuda (same device) and a GPU-side copy.
    EXPECT_EQ(bytes_of(ops::to_device(on_gpu, gpu()).to(Device::cpu())), bytes_of(x));
    EXPECT_EQ(bytes_of(on_gpu.clone().to(Device::cpu())), bytes_of(x));
  }
}

TEST(CudaCopy, StridedViewsOnEitherSide) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Tensor x = random_bits({4, 6, 10}, dt, 7);
    const Tensor views[] = {x.permute({2, 0, 1}), x.slice(2, 1, 10, 2), x.select(1, 3),
                            x.slice(0, 1, 2).expand({5, 6, 10}), x.transpose(0, 1)};
    for (const Tensor& v : views) {
      SCOPED_TRACE(shape_str(v.shape()));
      // A strided host view goes up packed.
      EXPECT_EQ(bytes_of(v.to(gpu()).to(Device::cpu())), bytes_of(v));
    }
    // Strided views of a device tensor: gathered on the GPU (copy op, download, cuda->cuda).
    const Tensor g = x.to(gpu());
    const Tensor gviews[] = {g.permute({2, 0, 1}), g.slice(2, 1, 10, 2), g.select(1, 3),
                             g.slice(0, 1, 2).expand({5, 6, 10}), g.transpose(0, 1)};
    for (size_t k = 0; k < std::size(views); ++k) {
      SCOPED_TRACE(shape_str(views[k].shape()));
      EXPECT_EQ(bytes_of(gviews[k].to(Device::cpu())), bytes_of(views[k]));
      const Tensor packed = gviews[k].contiguous();
      EXPECT_TRUE(packed.is_contiguous());
      EXPECT_EQ(packed.device(), gpu());
      EXPECT_EQ(bytes_of(packed.to(Device::cpu())), bytes_of(views[k]));
    }
  }
}

TEST(CudaCopy, BetweenDevices) {
  DIFFQ_REQUIRE_GPU();
  if (backend::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const Tensor x = random_bits({33, 17}, DType::bf16, 3);
  const Tensor on1 = x.to(gpu()).to(Device::cuda(1));
  EXPECT_EQ(on1.device(), Device::cuda(1));
  EXPECT_EQ(bytes_of(on1.to(Device::cpu())), bytes_of(x));
  EXPECT_EQ(bytes_of(x.to(gpu()).transpose(0, 1).to(Device::cuda(1)).to(Device::cpu())),
            bytes_of(x.transpose(0, 1)));
}

TEST(CudaCast, MatchesCpuBitForBit) {
  DIFFQ_REQUIRE_GPU();
  // Every kind of f32: random bit patterns (NaNs, infinities, denormals, ties), plus the edges.
  Tensor f = random_bits({64, 1024}, DType::f32, 11);
  const float edges[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                         65504.0f, 65520.0f, 1.00390625f /* bf16 tie, even */, 1.01171875f /* tie, odd */,
                         std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26)};
  for (size_t i = 0; i < std::size(edges); ++i) f.data<float>()[i] = edges[i];
  const std::pair<DType, DType> pairs[] = {{DType::f32, DType::bf16}, {DType::f32, DType::f16},
                                           {DType::bf16, DType::f32}, {DType::f16, DType::f32},
                                           {DType::bf16, DType::f16}, {DType::f16, DType::bf16}};
  for (auto [from, to] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    // Sources of the narrow types are random bits too, so their NaNs and denormals are covered.
    const Tensor src = from == DType::f32 ? f : random_bits({64, 1024}, from, 12);
    const Tensor cpu = src.to(to);
    const Tensor gpu_out = src.to(gpu()).to(to);
    EXPECT_EQ(gpu_out.device(), gpu());
    EXPECT_EQ(gpu_out.dtype(), to);
    EXPECT_EQ(bytes_of(gpu_out.to(Device::cpu())), bytes_of(cpu));
    // The same from a strided device view.
    const Tensor t = src.transpose(0, 1);
    EXPECT_EQ(bytes_of(t.to(gpu()).to(to).to(Device::cpu())), bytes_of(t.to(to)));
    EXPECT_EQ(bytes_of(src.to(gpu()).transpose(0, 1).to(to).to(Device::cpu())), bytes_of(t.to(to)));
  }
}

// Casts with the integer dtypes and boolean at either end (Wan's int64 positions and timesteps -> float,
// masks, indices): every ordered pair, random bit patterns (so NaNs, infinities and out-of-range floats
// saturate, int64s beyond 2^24 round), contiguous and strided, equal to the CPU's bytes.
TEST(CudaCast, IntegerAndMixedPairsMatchCpu) {
  DIFFQ_REQUIRE_GPU();
  const DType types[] = {DType::f32, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64,
                         DType::boolean};
  for (DType from : types) {
    const Tensor src = random_bits({33, 65}, from, 40 + int(from));
    for (DType to : types) {
      if (from == to) continue;
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      EXPECT_EQ(bytes_of(src.to(gpu()).to(to).to(Device::cpu())), bytes_of(src.to(to)));
      const Tensor t = src.transpose(0, 1);
      EXPECT_EQ(bytes_of(src.to(gpu()).transpose(0, 1).to(to).to(Device::cpu())), bytes_of(t.to(to)));
    }
  }
}

TEST(CudaCast, UnsupportedPairIsAClearError) {
  DIFFQ_REQUIRE_GPU();
  const Tensor g = Tensor::full({4}, 1.0, DType::f32, gpu());
  try {
    g.to(DType::f8_e4m3fn);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    // Refused by the dispatcher with the CUDA kernels' rules (backend/cuda_kernel_rules.h), before any launch.
    EXPECT_NE(std::string(e.what()).find("[cast] no kernel for this call on cuda:0: a cast float32 -> float8_e4m3fn"),
              std::string::npos) << e.what();
  }
}
