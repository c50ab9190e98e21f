// The caching device allocator's core, in plain C++ (no CUDA types), so that its decisions are tested
// host-side on recorded call sequences (tests/cuda/test_caching_pool.cpp) and the CUDA part
// (allocator.cpp) is only the RawDeviceMemory below over cudaMalloc/cudaFree/cudaEvent*.
//
// Why: a cudaFree synchronises the device and a cudaMalloc often does, so allocating every op's output
// with them made elementwise ops 4-5x slower than torch on the H200. The pool keeps freed memory and
// hands it out again, in the spirit of torch's CUDACachingAllocator (simplified):
//   - sizes round up to 512 bytes; requests up to 1 MiB come from the small pool (2 MiB segments),
//     bigger ones from the large pool (segments of the request rounded up to 2 MiB);
//   - a request takes the smallest cached free block of its pool and stream that fits (best fit) and
//     splits off the rest when that is large enough to serve a later request of the same pool
//     (>= 512 bytes in the small pool, > 1 MiB in the large); neighbours of one segment coalesce when
//     both are free;
//   - stream order: every block belongs to the stream its segment was allocated for; a freed block is
//     reusable at once by later allocations on that stream (the stream runs kernels in order, so a
//     later kernel cannot overtake the previous user). A block also used on another stream
//     (record_stream) becomes reusable only after an event recorded on that stream at free time has
//     completed;
//   - when the device is out of memory, the pool synchronises, returns every unused cached segment
//     and retries once, then throws an Error naming the device, the request and the bytes allocated,
//     reserved and free;
//   - statistics as torch.cuda.memory_stats: allocated (rounded block bytes) and reserved (segment
//     bytes) with peaks, device mallocs/frees, allocations; empty_cache returns unused segments.
// Thread-safe: one mutex per pool (deallocation comes from any thread's tensor destructors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace diffq::backend::cuda {

// A stream as the pool sees it (cudaStream_t's bits in the CUDA build; 0 is the legacy default stream).
using StreamId = uintptr_t;

// What the pool needs from the device. Only malloc and synchronize may throw: the rest run in
// deallocation paths, report their own errors and carry on.
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // A new segment of `bytes`, or nullptr when the device has no room (*why: the runtime's words).
  virtual void* malloc(size_t bytes, std::string* why) = 0;
  virtual void free(void* p, size_t bytes) noexcept = 0;
  // An event recorded now on `stream`; nullptr when it could not be recorded.
  virtual void* record_event(StreamId stream) noexcept = 0;
  // Whether the work before the event has completed (a failed query counts as completed).
  virtual bool event_done(void* event) noexcept = 0;
  virtual void destroy_event(void* event) noexcept = 0;
  // Waits until all work on the device has completed.
  virtual void synchronize() = 0;
  // Free bytes on the device as the driver reports them; -1 when unknown.
  virtual int64_t device_free_bytes() noexcept = 0;
};

struct PoolStats {
  int64_t allocated_bytes = 0, peak_allocated_bytes = 0;  // live blocks (rounded sizes)
  int64_t requested_bytes = 0, peak_requested_bytes = 0;  // live blocks (sizes asked for)
  int64_t reserved_bytes = 0, peak_reserved_bytes = 0;    // segments held from the device
  int64_t num_allocs = 0, num_frees = 0;                  // allocate / free calls served
  int64_t num_device_mallocs = 0, num_device_frees = 0;   // segments obtained / returned
  int64_t num_alloc_retries = 0;  // device mallocs retried after emptying the cache
  int64_t num_ooms = 0;           // requests that failed even then
  int64_t pending_event_blocks = 0;  // freed blocks waiting for another stream's event
};

class CachingPool {
 public:
  static constexpr size_t kRound = 512;                  // granularity of every block
  static constexpr size_t kSmallRequest = size_t(1) << 20;  // <= this: the small pool
  static constexpr size_t kSmallSegment = size_t(2) << 20;  // segment size of the small pool
  static constexpr size_t kLargeRound = size_t(2) << 20;    // large segments are multiples of this

  // `device` names the device in errors ("cuda:0"); `raw` must outlive the pool.
  CachingPool(std::string device, RawDeviceMemory& raw);
  ~CachingPool();  // returns every segment it holds (live blocks included: the owner is going away)
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  // A block of at least `nbytes` (512-byte aligned relative to its segment) for use on `stream`.
  void* allocate(size_t nbytes, StreamId stream);
  // Returns a block; never throws. Unknown pointers are reported on stderr and ignored.
  void free(void* p) noexcept;
  // Whether `p` is a live block of this pool.
  bool owns(const void* p) const;
  // A graph pool retains its segments (captured CUDA graphs keep addressing them even after their
  // blocks are freed): none is returned to the device, not on an out-of-memory retry nor by empty_cache,
  // while `retain` holds.
  void set_retain_segments(bool retain);
  // `p` (a live block) is also used on `stream`: when freed it is held back until that use is over.
  void record_stream(void* p, StreamId stream);
  // Synchronises, then returns every segment with no live block to the device.
  void empty_cache();

  PoolStats stats() const;
  void reset_peak();  // peaks restart at the current values
  static size_t round_size(size_t nbytes);

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;       // rounded bytes
    size_t requested = 0;  // bytes asked for (live blocks)
    StreamId stream = 0;   // the stream of its segment
    bool small = false;
    bool allocated = false;
    int pending_events = 0;         // events of other streams still to complete after its free
    Block* prev = nullptr;          // neighbours within the segment (the head has none before it)
    Block* next = nullptr;
    std::vector<StreamId> used_on;  // other streams it was used on (record_stream)
  };
  // Best fit: the free blocks of one pool ordered by stream, then size, then address.
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& pool_of(const Block* b) { return b->small ? small_free_ : large_free_; }
  Block* find_free(size_t size, bool small, StreamId stream);
  Block* new_segment(size_t size, bool small, StreamId stream, const std::string& why_context);
  void split(Block* b, size_t size);
  void insert_free(Block* b);  // coalesces with free neighbours, then caches
  void process_events();
  void release_unused_segments();
  [[noreturn]] void fail_oom(size_t nbytes, size_t segment_bytes, const std::string& why);

  std::string device_;
  RawDeviceMemory& raw_;
  mutable std::mutex mu_;
  FreeSet small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;
  std::deque<std::pair<void*, Block*>> events_;  // (event, freed block) not yet seen completed
  std::set<Block*> segments_;                    // the first block of every segment held
  bool retain_segments_ = false;
  PoolStats stats_;
};

}  // namespace diffq::backend::cuda
