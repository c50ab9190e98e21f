// Asking for a CUDA tensor where there is none fails with a clear diffq::Error, in every build: a CPU
// build says it has no CUDA backend; a CUDA build on a machine without a GPU says no device is present.
// On a machine with a GPU, the tests that need its absence skip.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/tensor.h"
#include "ops/ops.h"
#ifdef DIFFQ_HAS_CUDA
#include "backend/cuda/runtime.h"
#endif

using namespace diffq;

namespace {

bool gpu_present() {
#ifdef DIFFQ_HAS_CUDA
  return backend::cuda::device_count() > 0;
#else
  return false;
#endif
}

// What the error must say here.
std::string expected_reason() {
#ifdef DIFFQ_HAS_CUDA
  return "no CUDA device present";
#else
  return "has no CUDA backend";
#endif
}

void expect_clear_error(const std::function<void()>& f, const std::string& device) {
  try {
    f();
    FAIL() << "expected a diffq::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(expected_reason()), std::string::npos) << msg;
    EXPECT_NE(msg.find(device), std::string::npos) << msg;
  }
}

}  // namespace

TEST(DeviceErrors, EmptyOnCudaWithoutGpu) {
  if (gpu_present()) GTEST_SKIP() << "a CUDA device is present";
  expect_clear_error([] { Tensor::empty({2, 3}, DType::f32, Device::cuda()); }, "cuda:0");
  expect_clear_error([] { Tensor::zeros({4}, DType::bf16, Device::cuda(1)); }, "cuda:1");
}

TEST(DeviceErrors, CopyToCudaWithoutGpu) {
  if (gpu_present()) GTEST_SKIP() << "a CUDA device is present";
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  expect_clear_error([&] { x.to(Device::cuda()); }, "cuda:0");
  expect_clear_error([&] { x.transpose(0, 1).to(Device::parse("cuda:2")); }, "cuda:2");
}

TEST(DeviceErrors, MemoryStatsOfCudaWithoutGpu) {
  if (gpu_present()) GTEST_SKIP() << "a CUDA device is present";
  expect_clear_error([] { memory_stats(Device::cuda()); }, "cuda:0");
  expect_clear_error([] { reset_peak_memory_stats(Device::cuda()); }, "cuda:0");
}

TEST(DeviceErrors, CpuKeepsWorking) {
  // A failed CUDA request leaves the CPU paths (and their accounting) untouched.
  if (!gpu_present()) {
    EXPECT_THROW(Tensor::empty({8}, DType::f32, Device::cuda()), Error);
  }
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    const Tensor t = Tensor::full({8}, 2.0, DType::f32);
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before + 32);
    EXPECT_EQ(t.to_f32_vector(), std::vector<float>(8, 2.0f));
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
}
