// The caching pool's decisions on scripted call sequences, host-side: a fake device records every call
// the pool makes (segment mallocs and frees, events, synchronisations), so reuse, splitting,
// coalescing, stream order, the out-of-memory path and the statistics are checked without a GPU.
// The same pool over cudaMalloc/cudaEvent* is checked on a GPU by CudaCachingAllocator.* (test_cuda.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/caching_pool.h"
#include "diffq/error.h"

using namespace diffq;
using namespace diffq::backend::cuda;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// A device of `capacity` bytes whose addresses are never touched: segments are handed out 1 GiB
// apart so that no two are adjacent. Events complete only when the test says so or on synchronize.
class FakeDevice final : public RawDeviceMemory {
 public:
  explicit FakeDevice(size_t capacity = size_t(1) << 40) : capacity_(capacity) {}

  void* malloc(size_t bytes, std::string* why) override {
    calls.push_back("malloc " + std::to_string(bytes));
    if (used_ + bytes > capacity_) {
      *why = "fake: out of memory";
      return nullptr;
    }
    used_ += bytes;
    void* p = reinterpret_cast<void*>(next_);
    next_ += uintptr_t(1) << 30;
    segments_[p] = bytes;
    return p;
  }
  void free(void* p, size_t bytes) noexcept override {
    calls.push_back("free " + std::to_string(bytes));
    EXPECT_EQ(segments_.count(p), 1u);
    EXPECT_EQ(segments_[p], bytes);
    segments_.erase(p);
    used_ -= bytes;
  }
  void* record_event(StreamId stream) noexcept override {
    calls.push_back("record " + std::to_string(stream));
    void* e = reinterpret_cast<void*>(uintptr_t(++event_count_));
    events_[e] = {stream, false};
    return e;
  }
  bool event_done(void* e) noexcept override { return events_.at(e).second; }
  void destroy_event(void* e) noexcept override { events_.erase(e); }
  void synchronize() override {
    calls.push_back("sync");
    for (auto& [e, s] : events_) s.second = true;
  }
  int64_t device_free_bytes() noexcept override { return int64_t(capacity_ - used_); }

  void complete(StreamId stream) {  // the work queued on `stream` so far has run
    for (auto& [e, s] : events_)
      if (s.first == stream) s.second = true;
  }
  size_t live_events() const { return events_.size(); }
  size_t used() const { return used_; }
  std::vector<std::string> take_calls() { return std::exchange(calls, {}); }

  std::vector<std::string> calls;

 private:
  size_t capacity_, used_ = 0;
  uintptr_t next_ = uintptr_t(1) << 32;
  std::map<void*, size_t> segments_;
  std::map<void*, std::pair<StreamId, bool>> events_;
  int event_count_ = 0;
};

using Calls = std::vector<std::string>;
std::string m(size_t bytes) { return "malloc " + std::to_string(bytes); }
std::string f(size_t bytes) { return "free " + std::to_string(bytes); }
char* at(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST(CachingPool, RoundsTo512Bytes) {
  EXPECT_EQ(CachingPool::round_size(0), 512u);
  EXPECT_EQ(CachingPool::round_size(1), 512u);
  EXPECT_EQ(CachingPool::round_size(512), 512u);
  EXPECT_EQ(CachingPool::round_size(513), 1024u);
  EXPECT_EQ(CachingPool::round_size(MiB + 1), MiB + 512);
}

TEST(CachingPool, FreedBlockIsReusedWithoutADeviceMalloc) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(1000, 0);
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
  pool.free(a);
  EXPECT_EQ(pool.allocate(1000, 0), a);  // the same block, on the same stream, at once
  void* big = pool.allocate(8 * MiB, 0);
  pool.free(big);
  for (int i = 0; i < 100; ++i) pool.free(pool.allocate(7 * MiB + 12345, 0));  // split from the 8 MiB block
  EXPECT_EQ(dev.take_calls(), (Calls{m(8 * MiB)}));
  EXPECT_EQ(pool.stats().num_device_mallocs, 2);
}

TEST(CachingPool, SmallRequestsShareA2MiBSegment) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(1000, 0);
  void* b = pool.allocate(1, 0);
  void* c = pool.allocate(0, 0);
  void* d = pool.allocate(MiB, 0);  // 1 MiB exactly is still small
  EXPECT_EQ(at(b), at(a) + 1024);
  EXPECT_EQ(at(c), at(b) + 512);
  EXPECT_EQ(at(d), at(c) + 512);
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
  // The segment has 2 MiB - 1 MiB - 2 KiB left: a second 1 MiB request needs a new one.
  pool.allocate(MiB, 0);
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
}

TEST(CachingPool, SmallAndLargePoolsAreSeparate) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* large = pool.allocate(MiB + 1, 0);  // large: its own segment, rounded up to 2 MiB
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
  pool.free(large);
  void* small = pool.allocate(512, 0);  // not carved from the cached large segment
  EXPECT_NE(small, large);
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
  pool.free(small);
  EXPECT_EQ(pool.allocate(2 * MiB, 0), large);  // a large request takes the large block back
  pool.allocate(5 * MiB, 0);
  pool.allocate(2 * MiB + 1, 0);
  EXPECT_EQ(dev.take_calls(), (Calls{m(6 * MiB), m(4 * MiB)}));  // large segments: multiples of 2 MiB
  EXPECT_TRUE(dev.calls.empty());
}

TEST(CachingPool, SplitsBestFitAndCoalesces) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* seg = pool.allocate(10 * MiB, 0);
  pool.free(seg);
  void* a = pool.allocate(3 * MiB, 0);
  void* b = pool.allocate(3 * MiB, 0);
  EXPECT_EQ(a, seg);
  EXPECT_EQ(at(b), at(a) + 3 * MiB);
  // 4 MiB are left; 3.5 MiB leaves 0.5 MiB, too little for a large block: the block keeps it.
  void* c = pool.allocate(3 * MiB + 512 * KiB, 0);
  EXPECT_EQ(at(c), at(b) + 3 * MiB);
  EXPECT_EQ(pool.stats().allocated_bytes, int64_t(10 * MiB));
  EXPECT_EQ(pool.stats().requested_bytes, int64_t(9 * MiB + 512 * KiB));
  EXPECT_EQ(dev.take_calls(), (Calls{m(10 * MiB)}));

  // Best fit: with free blocks of 3 MiB (a) and 4 MiB (c), a 2.5 MiB request takes a.
  pool.free(a);
  pool.free(c);
  void* d = pool.allocate(2 * MiB + 512 * KiB, 0);
  EXPECT_EQ(d, a);  // and keeps a's 0.5 MiB rest (too small to split off)
  pool.free(d);
  // Freeing the middle block merges all three into the whole segment again.
  pool.free(b);
  EXPECT_EQ(pool.allocate(10 * MiB, 0), seg);
  EXPECT_TRUE(dev.take_calls().empty());
}

TEST(CachingPool, SmallBlocksCoalesceBackIntoTheSegment) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(pool.allocate(256 * KiB, 0));  // fills the 2 MiB segment
  EXPECT_EQ(dev.take_calls(), (Calls{m(2 * MiB)}));
  for (int i : {1, 3, 5, 7, 0, 2, 6, 4}) pool.free(v[size_t(i)]);
  EXPECT_EQ(pool.allocate(MiB, 0), v[0]);
  EXPECT_EQ(pool.allocate(MiB, 0), v[4]);
  EXPECT_TRUE(dev.take_calls().empty());
}

TEST(CachingPool, BlocksBelongToTheirStream) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(4 * MiB, 1);
  pool.free(a);
  void* b = pool.allocate(4 * MiB, 2);  // stream 2 is not ordered after stream 1's use of a
  EXPECT_NE(b, a);
  EXPECT_EQ(dev.take_calls(), (Calls{m(4 * MiB), m(4 * MiB)}));
  EXPECT_EQ(pool.allocate(4 * MiB, 1), a);
}

TEST(CachingPool, CrossStreamUseWaitsForTheEvent) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(3 * MiB, 0);
  pool.record_stream(a, 7);
  pool.record_stream(a, 7);  // once per stream
  pool.record_stream(a, 0);  // its own stream: nothing to wait for
  pool.free(a);
  EXPECT_EQ(dev.take_calls(), (Calls{m(4 * MiB), "record 7"}));
  EXPECT_EQ(pool.stats().pending_event_blocks, 1);
  // Stream 7 may still read a: a request of stream 0 gets other memory.
  void* b = pool.allocate(3 * MiB, 0);
  EXPECT_NE(b, a);
  EXPECT_EQ(dev.take_calls(), (Calls{m(4 * MiB)}));
  pool.free(b);
  dev.complete(7);
  EXPECT_EQ(pool.allocate(3 * MiB, 0), a);  // the event completed: a is back
  EXPECT_EQ(pool.stats().pending_event_blocks, 0);
  EXPECT_EQ(dev.live_events(), 0u);
  EXPECT_TRUE(dev.take_calls().empty());
  // The recorded use ended with that free: the next free of a records nothing.
  pool.free(a);
  EXPECT_TRUE(dev.take_calls().empty());
}

TEST(CachingPool, PendingBlockDoesNotCoalesceUntilItsEventCompletes) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(1000, 0);
  void* b = pool.allocate(1000, 0);
  pool.record_stream(a, 3);
  pool.free(a);
  pool.free(b);
  dev.take_calls();
  pool.empty_cache();  // synchronises first, so a's event completes and the segment is whole again
  EXPECT_EQ(dev.take_calls(), (Calls{"sync", f(2 * MiB)}));
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
}

TEST(CachingPool, RecordStreamOfAForeignPointerIsAClearError) {
  FakeDevice dev;
  CachingPool pool("cuda:3", dev);
  int x = 0;
  try {
    pool.record_stream(&x, 1);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:3: record_stream of"), std::string::npos) << e.what();
  }
  pool.free(&x);  // reported on stderr, never thrown (it runs in destructors)
  pool.free(nullptr);
  EXPECT_EQ(pool.stats().num_frees, 0);
}

TEST(CachingPool, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  FakeDevice dev(8 * MiB);
  CachingPool pool("cuda:0", dev);
  pool.free(pool.allocate(4 * MiB, 0));  // cached, unused
  void* keep = pool.allocate(1000, 0);   // a live small block: its segment stays
  dev.take_calls();
  void* a = pool.allocate(5 * MiB, 0);
  EXPECT_EQ(dev.take_calls(), (Calls{m(6 * MiB), "sync", f(4 * MiB), m(6 * MiB)}));
  EXPECT_EQ(pool.stats().num_alloc_retries, 1);
  EXPECT_EQ(pool.stats().reserved_bytes, int64_t(8 * MiB));
  (void)a;
  (void)keep;
}

TEST(CachingPool, OutOfMemoryAfterTheRetryIsAClearError) {
  FakeDevice dev(8 * MiB);
  CachingPool pool("cuda:5", dev);
  void* a = pool.allocate(5 * MiB, 0);  // a 6 MiB segment, all allocated (1 MiB left is too little to split)
  pool.free(pool.allocate(1000, 0));    // a cached small segment: 8 MiB reserved, 0 free
  dev.take_calls();
  try {
    pool.allocate(3 * MiB, 0);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part :
         {"[memory] cuda:5: out of memory allocating 3145728 bytes", "a new segment of 4194304 bytes",
          "fake: out of memory", "6291456 bytes (6.0 MiB) allocated", "6291456 bytes (6.0 MiB) reserved",
          "2097152 bytes (2.0 MiB) free on the device"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  }
  // The retry returned the unused small segment first; the live block and its segment are intact.
  EXPECT_EQ(dev.take_calls(), (Calls{m(4 * MiB), "sync", f(2 * MiB), m(4 * MiB)}));
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.allocated_bytes, int64_t(6 * MiB));
  EXPECT_EQ(s.reserved_bytes, int64_t(6 * MiB));
  pool.free(a);
  EXPECT_NE(pool.allocate(4 * MiB, 0), nullptr);  // the pool still works
}

TEST(CachingPool, StatsAreExactOnAScriptedSequence) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* a = pool.allocate(100, 0);            // small: 512 of a 2 MiB segment
  void* b = pool.allocate(3 * MiB + 1, 0);    // large: a 4 MiB segment, not split (1 MiB - 512 left)
  PoolStats s = pool.stats();
  EXPECT_EQ(s.requested_bytes, int64_t(3 * MiB + 101));
  EXPECT_EQ(s.allocated_bytes, int64_t(4 * MiB + 512));
  EXPECT_EQ(s.reserved_bytes, int64_t(6 * MiB));
  EXPECT_EQ(s.num_device_mallocs, 2);
  EXPECT_EQ(s.num_allocs, 2);
  pool.free(b);
  void* c = pool.allocate(2 * MiB, 0);  // from b's cached segment, split (2 MiB left)
  pool.free(a);
  s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(2 * MiB));
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(4 * MiB + 512));
  EXPECT_EQ(s.requested_bytes, int64_t(2 * MiB));
  EXPECT_EQ(s.peak_requested_bytes, int64_t(3 * MiB + 101));
  EXPECT_EQ(s.reserved_bytes, int64_t(6 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(6 * MiB));
  EXPECT_EQ(s.num_allocs, 3);
  EXPECT_EQ(s.num_frees, 2);
  EXPECT_EQ(s.num_device_mallocs, 2);
  EXPECT_EQ(s.num_device_frees, 0);
  pool.reset_peak();
  s = pool.stats();
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(2 * MiB));
  EXPECT_EQ(s.peak_requested_bytes, int64_t(2 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(6 * MiB));
  pool.empty_cache();  // the small segment is unused; the large one holds c
  s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, int64_t(4 * MiB));
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(6 * MiB));
  EXPECT_EQ(s.num_device_frees, 1);
  pool.free(c);
  pool.empty_cache();
  s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.requested_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.num_device_frees, 2);
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CachingPool, EmptyCacheReturnsOnlyUnusedSegments) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  void* live_small = pool.allocate(1000, 0);       // segment 1 (2 MiB): in use
  void* a = pool.allocate(1000, 1);                // segment 2 (2 MiB, stream 1): will be unused
  void* b = pool.allocate(MiB, 1);
  void* live_large = pool.allocate(10 * MiB, 0);   // segment 3: in use
  void* part = pool.allocate(4 * MiB, 0);          // segment 4: in use by half once split below
  pool.free(part);
  void* half = pool.allocate(2 * MiB, 0);
  pool.free(pool.allocate(6 * MiB, 0));            // segment 5: unused
  pool.free(a);
  pool.free(b);
  EXPECT_EQ(pool.stats().reserved_bytes, int64_t(2 + 2 + 10 + 4 + 6) * int64_t(MiB));
  dev.take_calls();
  pool.empty_cache();
  Calls calls = dev.take_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls[0], "sync");
  std::sort(calls.begin() + 1, calls.end());
  EXPECT_EQ(calls, (Calls{"sync", f(2 * MiB), f(6 * MiB)}));
  EXPECT_EQ(pool.stats().reserved_bytes, int64_t(2 + 10 + 4) * int64_t(MiB));
  // The live blocks are untouched and a request after that mallocs again.
  pool.free(half);
  EXPECT_EQ(pool.allocate(4 * MiB, 0), part);
  pool.allocate(6 * MiB, 0);
  EXPECT_EQ(dev.take_calls(), (Calls{m(6 * MiB)}));
  (void)live_small;
  (void)live_large;
}

TEST(CachingPool, DestructorReturnsEverySegment) {
  FakeDevice dev;
  {
    CachingPool pool("cuda:0", dev);
    void* a = pool.allocate(1000, 0);
    pool.allocate(5 * MiB, 0);
    pool.record_stream(a, 2);
    pool.free(a);  // pending on stream 2's event
  }
  EXPECT_EQ(dev.used(), 0u);
  EXPECT_EQ(dev.live_events(), 0u);
}

TEST(CachingPool, ConcurrentAllocateAndFreeKeepTheBooks) {
  FakeDevice dev;
  CachingPool pool("cuda:0", dev);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, t] {
      std::vector<void*> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(pool.allocate(size_t(1 + (i * 7919 + t) % (3 * MiB)), 0));
        if (held.size() > 5) {
          pool.free(held.front());
          held.erase(held.begin());
        }
      }
      for (void* p : held) pool.free(p);
    });
  for (auto& th : threads) th.join();
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.num_allocs, 8000);
  EXPECT_EQ(s.num_frees, 8000);
  pool.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}
