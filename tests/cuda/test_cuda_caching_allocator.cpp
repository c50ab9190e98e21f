// The caching device allocator on a GPU (the pool's decisions are checked host-side in
// test_caching_pool.cpp): warm loops stop calling cudaMalloc, the statistics of a FLUX-sized sequence
// of activations are exact, empty_cache gives memory back to the driver, reused blocks compute right,
// and a block used on another stream waits for that stream. Tests of the caching mode skip when
// DIFFQ_CUDA_ALLOC=plain; CudaPlainAllocator.* runs only then (run test_cuda once more with it set).
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cuda/allocator.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;

#define DIFFQ_REQUIRE_CACHING()                                                                   \
  do {                                                                                            \
    DIFFQ_REQUIRE_GPU();                                                                          \
    if (!::diffq::backend::cuda::caching_allocator_enabled()) GTEST_SKIP() << "DIFFQ_CUDA_ALLOC=plain"; \
  } while (0)

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

int64_t driver_free_bytes() {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return int64_t(free_bytes);
}

}  // namespace

TEST(CudaCachingAllocator, WarmLoopDoesNoFurtherDeviceMalloc) {
  DIFFQ_REQUIRE_CACHING();
  const Tensor a = Tensor::full({1024, 1024}, 1.5, DType::bf16, gpu());
  const Tensor b = Tensor::full({1024, 1024}, 2.0, DType::bf16, gpu());
  auto iteration = [&] {
    // Sizes of both pools: 2 KiB, 200 KiB and 1 MiB small blocks, 2 MiB + 3 MiB + 48 MiB large ones.
    std::vector<Tensor> held;
    for (int64_t n : {int64_t(512), int64_t(50 << 10), int64_t(256 << 10), int64_t(512 << 10), int64_t(768 << 10),
                      int64_t(12 << 20)})
      held.push_back(Tensor::empty({n}, DType::f32, gpu()));
    Tensor c = ops::add(a, b);           // each op's output comes from the cache after the first round
    Tensor d = ops::mul(c, b);
    return ops::add_scalar(d, 1.0);
  };
  iteration();  // warm-up: the segments are made here (twice: the second round starts from the cache)
  iteration();
  const MemoryStats warm = memory_stats(gpu());
  for (int i = 0; i < 200; ++i) iteration();
  const Tensor last = iteration();
  const MemoryStats after = memory_stats(gpu());
  EXPECT_EQ(after.num_device_mallocs, warm.num_device_mallocs);
  EXPECT_EQ(after.reserved_bytes, warm.reserved_bytes);
  EXPECT_GT(after.num_allocs, warm.num_allocs + 200 * 9 - 1);
  EXPECT_EQ(last.to_f32_vector()[12345], 8.0f);  // (1.5 + 2) * 2 + 1, computed in reused blocks
}

TEST(CudaCachingAllocator, FluxSizedSequenceHasExactStats) {
  DIFFQ_REQUIRE_CACHING();
  const Device g = gpu();
  empty_cache(g);
  reset_peak_memory_stats(g);
  const MemoryStats base = memory_stats(g);
  EXPECT_EQ(base.peak_reserved_bytes, base.reserved_bytes);
  // The activations of one FLUX.1-dev double-stream block at 1024x1024 in bf16 (4096 image + 512 text
  // tokens, width 3072, 24 heads of 128, MLP 12288), allocated and dropped in the forward's order.
  const int64_t S = 4608, W = 3072;
  int64_t live = 0, peak = 0, count = 0;
  auto make = [&](const Shape& shape, DType dt) {
    Tensor t = Tensor::empty(shape, dt, g);
    live += int64_t(t.nbytes());
    peak = std::max(peak, live);
    ++count;
    return t;
  };
  auto drop = [&](Tensor& t) {
    live -= int64_t(t.nbytes());
    t = Tensor();
  };
  int64_t mallocs_after_first = 0, reserved_after_first = 0;
  for (int step = 0; step < 4; ++step) {
    Tensor temb = make({1, W}, DType::f32);          // 12 KiB: small pool
    Tensor mod = make({1, 6 * W}, DType::bf16);      // 36 KiB
    Tensor cos = make({S, 64}, DType::f32);          // 1.1 MiB: large pool
    Tensor sin = make({S, 64}, DType::f32);
    Tensor x = make({1, S, W}, DType::bf16);         // 27 MiB
    Tensor normed = make({1, S, W}, DType::bf16);
    Tensor qkv = make({1, S, 3 * W}, DType::bf16);   // 81 MiB
    drop(normed);
    Tensor q = make({1, 24, S, 128}, DType::bf16);
    Tensor k = make({1, 24, S, 128}, DType::bf16);
    Tensor v = make({1, 24, S, 128}, DType::bf16);
    drop(qkv);
    Tensor attn = make({1, S, W}, DType::bf16);
    drop(q);
    drop(k);
    drop(v);
    Tensor proj = make({1, S, W}, DType::bf16);
    drop(attn);
    Tensor mlp = make({1, S, 4 * W}, DType::bf16);   // 108 MiB
    Tensor act = make({1, S, 4 * W}, DType::bf16);
    drop(mlp);
    Tensor out = make({1, S, W}, DType::bf16);
    drop(act);
    const MemoryStats s = memory_stats(g);
    EXPECT_EQ(s.current_bytes, base.current_bytes + live);
    EXPECT_EQ(s.peak_bytes, base.current_bytes + peak);
    EXPECT_EQ(s.num_allocs, base.num_allocs + count);
    EXPECT_GE(s.peak_reserved_bytes, s.peak_bytes);
    EXPECT_GE(s.reserved_bytes, s.current_bytes);
    // Fragmentation stays bounded: less than twice the activations' peak plus one small segment.
    EXPECT_LE(s.peak_reserved_bytes - base.reserved_bytes, 2 * peak + 2 * MiB);
    if (step == 0) {
      mallocs_after_first = s.num_device_mallocs;
      reserved_after_first = s.reserved_bytes;
    } else {  // the same sequence again is served from the cache
      EXPECT_EQ(s.num_device_mallocs, mallocs_after_first) << "step " << step;
      EXPECT_EQ(s.reserved_bytes, reserved_after_first) << "step " << step;
    }
    for (Tensor* t : {&temb, &mod, &cos, &sin, &x, &proj, &out}) drop(*t);
  }
  EXPECT_EQ(memory_stats(g).current_bytes, base.current_bytes);
  empty_cache(g);
  EXPECT_EQ(memory_stats(g).reserved_bytes, base.reserved_bytes);  // every segment made here went back
  const backend::cuda::PoolStats p = backend::cuda::caching_pool_stats(g.index);
  EXPECT_EQ(p.allocated_bytes % 512, 0);
  EXPECT_EQ(p.pending_event_blocks, 0);
}

TEST(CudaCachingAllocator, EmptyCacheReturnsMemoryToTheDriver) {
  DIFFQ_REQUIRE_CACHING();
  const Device g = gpu();
  empty_cache(g);
  const int64_t reserved0 = memory_stats(g).reserved_bytes;
  const int64_t free0 = driver_free_bytes();
  const int64_t n = 1024 * MiB;
  { Tensor t = Tensor::empty({n}, DType::u8, g); }
  // Freed but cached: the driver still counts it as used, the allocator as reserved.
  EXPECT_LE(driver_free_bytes(), free0 - n);
  EXPECT_EQ(memory_stats(g).reserved_bytes, reserved0 + n);
  { Tensor t = Tensor::empty({n}, DType::u8, g); }  // served from the cache
  EXPECT_EQ(memory_stats(g).reserved_bytes, reserved0 + n);
  empty_cache(g);
  EXPECT_EQ(memory_stats(g).reserved_bytes, reserved0);
  EXPECT_GE(driver_free_bytes(), free0 - 32 * MiB);  // the driver's own bookkeeping may move a little
  // Live tensors are untouched.
  const Tensor kept = Tensor::full({5}, 3.0, DType::f32, g);
  empty_cache(g);
  EXPECT_EQ(kept.to_f32_vector(), (std::vector<float>{3, 3, 3, 3, 3}));
}

TEST(CudaCachingAllocator, OutOfMemoryNamesTheNumbers) {
  DIFFQ_REQUIRE_CACHING();
  try {
    Tensor::empty({int64_t(1) << 50}, DType::f32, gpu());  // 4 PiB
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : {"[memory] cuda:0: out of memory allocating 4503599627370496 bytes", "cudaMalloc",
                             "allocated by diffq", "reserved", "free on the device"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  }
  EXPECT_GE(backend::cuda::caching_pool_stats(0).num_ooms, 1);
}

// A block used on a second stream comes back only after that stream's work: the side stream is held
// by a host function until the test releases it, so the order is deterministic. Nothing in between
// needs a cudaMalloc (a cached block of the size is made first) or synchronises the device.
TEST(CudaCachingAllocator, RecordStreamHoldsTheBlockForTheOtherStream) {
  DIFFQ_REQUIRE_CACHING();
  const Device g = gpu();
  empty_cache(g);
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  const int64_t n = 4 * MiB;
  Tensor x = Tensor::empty({n}, DType::u8, g);
  { Tensor spare = Tensor::empty({n}, DType::u8, g); }  // a second cached block of that size
  void* const xp = x.data_ptr();
  backend::cuda::wait_for_compute_stream(0, side);
  static std::atomic<bool> release{false};
  release = false;
  auto hold = [](void*) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // never hang the suite
    while (!release.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  };
  ASSERT_EQ(cudaLaunchHostFunc(side, hold, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(xp, 7, size_t(n), side), cudaSuccess);  // x's use on the side stream, queued
  backend::cuda::record_stream(0, xp, side);
  x = Tensor();  // freed while the side stream still has to write it
  EXPECT_EQ(backend::cuda::caching_pool_stats(0).pending_event_blocks, 1);
  Tensor z = Tensor::empty({n}, DType::u8, g);
  EXPECT_NE(z.data_ptr(), xp);  // held back: another cached block serves the request
  ASSERT_EQ(cudaMemsetAsync(z.data_ptr(), 0, size_t(n), nullptr), cudaSuccess);  // on the compute stream
  release = true;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  uint8_t zb = 1, xb = 0;
  ASSERT_EQ(cudaMemcpy(&zb, static_cast<uint8_t*>(z.data_ptr()) + n - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&xb, static_cast<uint8_t*>(xp) + n - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(zb, 0);  // the side stream's write went to x's block, not z's
  EXPECT_EQ(xb, 7);
  // The event has completed: x's block is cached again and a request of its size finds it.
  std::vector<Tensor> held;
  bool found = false;
  for (int i = 0; i < 16 && !found; ++i) {
    held.push_back(Tensor::empty({n}, DType::u8, g));
    found = held.back().data_ptr() == xp;
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(backend::cuda::caching_pool_stats(0).pending_event_blocks, 0);
  cudaStreamDestroy(side);
}

TEST(CudaPlainAllocator, EveryAllocationIsACudaMalloc) {
  DIFFQ_REQUIRE_GPU();
  if (backend::cuda::caching_allocator_enabled()) GTEST_SKIP() << "runs with DIFFQ_CUDA_ALLOC=plain";
  const MemoryStats before = memory_stats(gpu());
  for (int i = 0; i < 3; ++i) Tensor::empty({1000}, DType::f32, gpu());
  const MemoryStats after = memory_stats(gpu());
  EXPECT_EQ(after.num_device_mallocs, before.num_device_mallocs + 3);
  EXPECT_EQ(after.reserved_bytes, after.current_bytes);
  empty_cache(gpu());  // nothing cached: a no-op
  EXPECT_EQ(backend::cuda::caching_pool_stats(0).num_device_mallocs, 0);
}

// The CPU allocator caches nothing of its own: reserved is what is live, empty_cache does nothing.
TEST(CpuMemoryStats, ReservedEqualsCurrentAndEmptyCacheIsANoOp) {
  const Tensor t = Tensor::empty({1000}, DType::f32);
  const MemoryStats s = memory_stats(Device::cpu());
  EXPECT_EQ(s.reserved_bytes, s.current_bytes);
  EXPECT_EQ(s.peak_reserved_bytes, s.peak_bytes);
  EXPECT_EQ(s.num_device_mallocs, 0);
  empty_cache(Device::cpu());
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, s.current_bytes);
}
