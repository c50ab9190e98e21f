// CUDA graphs for compile's reduce-overhead mode: the device work of a call is captured once on a
// capture stream with the call's allocations in the graph pool (allocator.h), instantiated, and
// replayed on the compute stream (the legacy default stream), where it is ordered after the copies into
// its inputs and before the copies out of its outputs. The capture stream is non-blocking: other
// threads keep queueing on the legacy stream meanwhile (offloading's prefetcher records fences there),
// which a blocking capturing stream would turn into capture errors. So work of the capturing thread
// that strayed onto the legacy stream would not be captured: every launch, library call and device copy
// of the backend names current_stream() (CudaStreams.* in tests/cuda/test_cuda_streams.cpp checks the
// sources), and what waits on the host refuses the capture (refuse_in_capture).
#include "backend/cuda/graph_capture.h"

#include <array>
#include <cstdio>
#include <exception>
#include <mutex>

#include "backend/cuda/allocator.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kMaxDevices = 64;

cudaStream_t capture_stream(int index) {
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::mutex mu;
  check(index >= 0 && index < kMaxDevices, "compile", "cuda:", index, " is beyond the devices diffq supports");
  std::lock_guard<std::mutex> lock(mu);
  if (!streams[size_t(index)]) {
    DeviceGuard guard(index);
    check_cuda(cudaStreamCreateWithFlags(&streams[size_t(index)], cudaStreamNonBlocking),
               "cudaStreamCreate (graph capture stream)", index);
  }
  return streams[size_t(index)];
}

class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, int index) : exec_(exec), index_(index) { graphs_created(index); }
  ~CudaGraph() override {
    if (cudaGraphExecDestroy(exec_) != cudaSuccess) cudaGetLastError();
    graphs_destroyed(index_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    DeviceGuard guard(index_);
    check_cuda(cudaGraphLaunch(exec_, current_stream()), "cudaGraphLaunch", index_);
  }

 private:
  cudaGraphExec_t exec_;
  int index_;
};

int64_t live_blocks(const PoolStats& s) { return s.num_allocs - s.num_frees; }

}  // namespace

std::unique_ptr<CapturedWork> capture_graph(int index, const std::function<void()>& body, std::string* why) {
  if (!caching_allocator_enabled()) {
    *why = "DIFFQ_CUDA_ALLOC=plain: a CUDA graph's buffers need the caching allocator's graph pool";
    return nullptr;
  }
  if (current_stream() != nullptr) {
    *why = "already capturing (a captured call inside another)";
    return nullptr;
  }
  DeviceGuard guard(index);
  const cudaStream_t s = capture_stream(index);
  std::string failed;
  cudaGraph_t graph = nullptr;
  {
    GraphPoolScope pool(index);
    const int64_t live_before = live_blocks(graph_pool_stats(index));
    // Relaxed: the graph pool may take a new segment (cudaMalloc) while the capture runs.
    check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture", index);
    {
      StreamScope scope(s);
      try {
        body();
      } catch (const std::exception& e) {
        failed = e.what();
      }
    }
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (end != cudaSuccess) {
      cudaGetLastError();
      if (failed.empty())
        failed = cat("the capture broke (", cudaGetErrorName(end), ": ", cudaGetErrorString(end),
                     "): an op waited on the host or joined another stream");
    }
    cudaGetLastError();  // a capture error must not surface at the next launch check
    if (failed.empty() && live_blocks(graph_pool_stats(index)) != live_before)
      failed = "a tensor made during the capture outlives it (a cache filled inside the captured call)";
  }
  if (!failed.empty()) {
    if (graph) cudaGraphDestroy(graph);
    *why = failed;
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    *why = cat("cudaGraphInstantiate: ", cudaGetErrorString(inst));
    return nullptr;
  }
  return std::make_unique<CudaGraph>(exec, index);
}

}  // namespace diffq::backend::cuda
