// What the CUDA device allocator offers beyond diffq::Allocator, for code that queues work on streams
// of its own (offloading's transfer stream) and for tests.
//
// The stream: every op queues its work on the thread's current stream (runtime.h: kernels, cuBLASLt,
// cuDNN, device copies), which is the legacy default stream except while a CUDA graph is captured; so
// that stream is "the" compute stream of each device (captured graphs are replayed on it too), and the
// caching allocator orders its blocks by it: a block freed by a tensor is handed to the next
// allocation at once, because whatever that allocation's user queues runs after the freed tensor's
// last kernel. A capture allocates from the graph pool (below) instead.
//
// Work queued on another stream must tell the allocator, as with torch:
//   - before using a block on another stream, make that stream wait for the compute stream (the block
//     may have been freed and reused while compute kernels using its previous owner are still queued):
//     wait_for_compute_stream;
//   - when that other stream's use may still be queued at the block's free, record_stream: the block
//     is then reused only once an event recorded on that stream at the free has completed.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/caching_pool.h"

namespace diffq::backend::cuda {

// False when DIFFQ_CUDA_ALLOC=plain (plain cudaMalloc/cudaFree per allocation, for debugging and
// compute-sanitizer runs); otherwise "caching" (the default). Read once, at the first device allocator.
bool caching_allocator_enabled();

// `p` (the start of an allocation of cuda:device's allocator) is also used on `stream`. No-op when
// the stream is the compute stream or caching is off (a cudaFree then synchronises anyway).
void record_stream(int device, void* p, cudaStream_t stream);

// Makes `stream` wait (on the device, not the host) for the work queued on cuda:device's compute
// stream so far.
void wait_for_compute_stream(int device, cudaStream_t stream);

// The caching pool's detailed statistics of cuda:device (all zero when caching is off).
PoolStats caching_pool_stats(int device);

// ---- the graph pool: where captured CUDA graphs' buffers live (graph_capture.cpp) ----
// While a GraphPoolScope is active on a thread, that thread's allocations on cuda:device come from the
// device's graph pool, a second caching pool; frees go back to the pool that made the block. A captured
// graph keeps addressing its buffers after their tensors are gone, so the graph pool returns no segment
// to the device while any graph lives (graphs_created / graphs_destroyed count them); its blocks are
// handed to later captures, which is safe because captured graphs of a device replay one at a time and
// nothing outside a capture allocates there. Needs the caching allocator (throws with
// DIFFQ_CUDA_ALLOC=plain).
class GraphPoolScope {
 public:
  explicit GraphPoolScope(int device);
  ~GraphPoolScope();
  GraphPoolScope(const GraphPoolScope&) = delete;
  GraphPoolScope& operator=(const GraphPoolScope&) = delete;

 private:
  int previous_;
};
PoolStats graph_pool_stats(int device);
void graphs_created(int device);
void graphs_destroyed(int device) noexcept;

}  // namespace diffq::backend::cuda
