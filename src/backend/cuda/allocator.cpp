// The CUDA device allocator: per device index, a caching pool (caching_pool.h) over cudaMalloc/cudaFree
// and cudaEvent* (never managed memory), on the device's compute stream (the legacy default stream,
// see allocator.h), with the current/peak accounting of diffq::Allocator so
// memory_stats(Device::cuda(i)) reports it, plus the pool's reserved bytes and device mallocs.
// Why caching: a cudaFree synchronises the device, so allocating every op's output with
// cudaMalloc/cudaFree made elementwise ops 4-5x slower than torch (../shared/peers/h200-diffq.md).
// DIFFQ_CUDA_ALLOC=plain restores plain cudaMalloc/cudaFree per allocation (debugging, and
// compute-sanitizer, which sees overruns only at cudaMalloc boundaries).
#include "backend/cuda/allocator.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"
#include "diffq/memory.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kMaxDevices = 64;

// The device whose graph pool this thread allocates from (a GraphPoolScope: a CUDA graph being
// captured), or -1.
thread_local int t_graph_pool_device = -1;

// Switches to `index` for the scope without throwing (deallocation paths run in destructors).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int index) {
    switched_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != index && cudaSetDevice(index) == cudaSuccess;
  }
  ~QuietDeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// At process exit the runtime may already be unloaded (cudaErrorCudartUnloading): harmless, unreported.
void report(cudaError_t err, const char* what, int index) {
  if (err != cudaSuccess && err != cudaErrorCudartUnloading)
    std::fprintf(stderr, "[memory] cuda:%d: %s failed: %s (%s)\n", index, what, cudaGetErrorString(err),
                 cudaGetErrorName(err));
  if (err != cudaSuccess) cudaGetLastError();
}

// The pool's view of one device.
class CudaDeviceMemory final : public RawDeviceMemory {
 public:
  explicit CudaDeviceMemory(int index) : index_(index) {}

  void* malloc(size_t bytes, std::string* why) override {
    DeviceGuard guard(index_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaSuccess) return p;
    cudaGetLastError();
    if (err != cudaErrorMemoryAllocation) check_cuda(err, cat("cudaMalloc of ", bytes, " bytes"), index_);
    *why = cat("cudaMalloc: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
    return nullptr;
  }
  void free(void* p, size_t) noexcept override {
    QuietDeviceGuard guard(index_);
    report(cudaFree(p), "cudaFree", index_);
  }
  void* record_event(StreamId stream) noexcept override {
    QuietDeviceGuard guard(index_);
    cudaEvent_t ev = nullptr;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err == cudaSuccess) {
      err = cudaEventRecord(ev, reinterpret_cast<cudaStream_t>(stream));
      if (err != cudaSuccess) cudaEventDestroy(ev);
    }
    if (err == cudaSuccess) return ev;
    report(err, "cudaEventRecord (for a block used on another stream)", index_);
    return nullptr;
  }
  bool event_done(void* event) noexcept override {
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: keep it out of the next launch check
      return false;
    }
    report(err, "cudaEventQuery", index_);
    return true;
  }
  void destroy_event(void* event) noexcept override {
    report(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy", index_);
  }
  void synchronize() override {
    DeviceGuard guard(index_);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (caching allocator)", index_);
  }
  int64_t device_free_bytes() noexcept override {
    QuietDeviceGuard guard(index_);
    size_t free_bytes = 0, total = 0;
    const cudaError_t err = cudaMemGetInfo(&free_bytes, &total);
    if (err == cudaSuccess) return int64_t(free_bytes);
    cudaGetLastError();
    return -1;
  }

 private:
  int index_;
};

bool read_caching_mode() {
  const char* v = std::getenv("DIFFQ_CUDA_ALLOC");
  const std::string mode = v ? v : "";
  check(mode.empty() || mode == "caching" || mode == "plain", "memory", "DIFFQ_CUDA_ALLOC=", mode,
        " is not a CUDA allocator mode: expected caching (the default) or plain");
  return mode != "plain";
}

class CudaAllocator final : public Allocator {
 public:
  CudaAllocator(int index, bool caching) : index_(index), raw_(index) {
    if (caching) pool_ = std::make_unique<CachingPool>("cuda:" + std::to_string(index), raw_);
  }

  void* allocate(size_t nbytes) override {
    if (t_graph_pool_device == index_) {
      void* p = graph_pool().allocate(nbytes, kComputeStream);
      record_alloc(nbytes);
      return p;
    }
    void* p = pool_ ? pool_->allocate(nbytes, kComputeStream) : plain_allocate(nbytes);
    record_alloc(nbytes);
    return p;
  }

  // Called from Storage destructors: must not throw, and with caching it neither synchronises nor
  // calls the driver (unless the block was used on another stream: then one event is recorded).
  void deallocate(void* p, size_t nbytes) override {
    record_free(nbytes);
    if (CachingPool* g = graph_pool_ptr_.load(std::memory_order_acquire); g && g->owns(p)) {
      g->free(p);
      return;
    }
    if (pool_) {
      pool_->free(p);
      return;
    }
    QuietDeviceGuard guard(index_);
    report(cudaFree(p), "cudaFree", index_);
  }

  Device device() const override { return Device::cuda(index_); }

  MemoryStats stats() const override {
    MemoryStats s = Allocator::stats();
    if (!pool_) {  // every live allocation is one cudaMalloc: reserved is what is live
      s.num_device_mallocs = plain_mallocs_.load();
      return s;
    }
    const PoolStats p = pool_->stats();
    s.reserved_bytes = p.reserved_bytes;
    s.peak_reserved_bytes = p.peak_reserved_bytes;
    s.num_device_mallocs = p.num_device_mallocs;
    return s;
  }

  void reset_peak() override {
    Allocator::reset_peak();
    if (pool_) pool_->reset_peak();
  }

  void empty_cache() override {
    if (pool_) pool_->empty_cache();
  }

  void record_stream(void* p, cudaStream_t stream) {
    if (pool_ && stream != nullptr && stream != cudaStreamLegacy) pool_->record_stream(p, StreamId(stream));
  }
  PoolStats pool_stats() const { return pool_ ? pool_->stats() : PoolStats{}; }

  // The pool of captured graphs' buffers (allocator.h): made on the first capture, its segments kept
  // while any captured graph of the device lives, returned once the last one is gone.
  CachingPool& graph_pool() {
    std::lock_guard<std::mutex> lock(graph_mu_);
    if (!graph_pool_) {
      graph_pool_ = std::make_unique<CachingPool>("cuda:" + std::to_string(index_) + " graph pool", raw_);
      graph_pool_ptr_.store(graph_pool_.get(), std::memory_order_release);
    }
    return *graph_pool_;
  }
  PoolStats graph_pool_stats() {
    std::lock_guard<std::mutex> lock(graph_mu_);
    return graph_pool_ ? graph_pool_->stats() : PoolStats{};
  }
  void graphs_changed(int delta) {
    std::lock_guard<std::mutex> lock(graph_mu_);
    live_graphs_ += delta;
    if (!graph_pool_) return;
    graph_pool_->set_retain_segments(live_graphs_ > 0);
    if (live_graphs_ == 0) graph_pool_->empty_cache();
  }

 private:
  static constexpr StreamId kComputeStream = 0;  // the legacy default stream (allocator.h)

  void* plain_allocate(size_t nbytes) {
    DeviceGuard guard(index_);
    void* p = nullptr;
    // cudaMalloc(0) returns nullptr; a real (tiny) block keeps allocate/deallocate symmetric.
    const cudaError_t err = cudaMalloc(&p, nbytes == 0 ? 1 : nbytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      const MemoryStats s = stats();
      fail("memory", "cuda:", index_, ": cudaMalloc of ", nbytes, " bytes failed: ", cudaGetErrorString(err),
           " (", cudaGetErrorName(err), "); diffq holds ", s.current_bytes, " bytes on this device (peak ",
           s.peak_bytes, ", DIFFQ_CUDA_ALLOC=plain)");
    }
    plain_mallocs_.fetch_add(1);
    return p;
  }

  int index_;
  CudaDeviceMemory raw_;
  std::unique_ptr<CachingPool> pool_;  // null with DIFFQ_CUDA_ALLOC=plain
  std::mutex graph_mu_;
  std::unique_ptr<CachingPool> graph_pool_;  // captured graphs' buffers (null before the first capture)
  std::atomic<CachingPool*> graph_pool_ptr_{nullptr};  // the same, read without the lock by deallocate
  int live_graphs_ = 0;
  std::atomic<int64_t> plain_mallocs_{0};
};

CudaAllocator& cuda_allocator(int index) {
  require_device(Device::cuda(index));
  check(index < kMaxDevices, "memory", "cuda:", index, " is beyond the ", kMaxDevices, " devices diffq supports");
  // Never destroyed: tensors freed during static destruction may still deallocate through them (their
  // segments go back to the driver with the process).
  static std::array<CudaAllocator*, kMaxDevices> allocators{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!allocators[size_t(index)]) allocators[size_t(index)] = new CudaAllocator(index, caching_allocator_enabled());
  return *allocators[size_t(index)];
}

}  // namespace

bool caching_allocator_enabled() {
  static const bool enabled = read_caching_mode();
  return enabled;
}

Allocator& device_allocator(int index) { return cuda_allocator(index); }

void record_stream(int device, void* p, cudaStream_t stream) { cuda_allocator(device).record_stream(p, stream); }

void wait_for_compute_stream(int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  cudaEvent_t ev = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", device);
  // The event is destroyed at once: a wait already queued on it keeps its recorded state.
  const std::unique_ptr<CUevent_st, cudaError_t (*)(cudaEvent_t)> owner(ev, &cudaEventDestroy);
  check_cuda(cudaEventRecord(ev, nullptr), "cudaEventRecord on the compute stream", device);
  check_cuda(cudaStreamWaitEvent(stream, ev, 0), "cudaStreamWaitEvent for the compute stream", device);
}

PoolStats caching_pool_stats(int device) { return cuda_allocator(device).pool_stats(); }

PoolStats graph_pool_stats(int device) { return cuda_allocator(device).graph_pool_stats(); }

GraphPoolScope::GraphPoolScope(int device) : previous_(t_graph_pool_device) {
  check(caching_allocator_enabled(), "memory", "a CUDA graph's buffers come from the caching allocator's graph pool: "
        "not available with DIFFQ_CUDA_ALLOC=plain");
  cuda_allocator(device).graph_pool();  // made now, outside the allocation path's lock
  t_graph_pool_device = device;
}
GraphPoolScope::~GraphPoolScope() { t_graph_pool_device = previous_; }

void graphs_created(int device) { cuda_allocator(device).graphs_changed(+1); }
void graphs_destroyed(int device) noexcept {
  try {
    cuda_allocator(device).graphs_changed(-1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[memory] cuda:%d: releasing the graph pool failed: %s\n", device, e.what());
  }
}

}  // namespace diffq::backend::cuda
