#include "backend/cuda/caching_pool.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <tuple>

#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr const char* kCtx = "memory";

void raise_peak(int64_t now, int64_t& peak) { peak = std::max(peak, now); }

// "123456 bytes (0.1 MiB)": exact for tests and scripts, readable for people.
std::string bytes_str(int64_t n) {
  char mib[48];
  std::snprintf(mib, sizeof(mib), " (%.1f MiB)", double(n) / double(1 << 20));
  return std::to_string(n) + " bytes" + mib;
}

}  // namespace

bool CachingPool::BySize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingPool::CachingPool(std::string device, RawDeviceMemory& raw) : device_(std::move(device)), raw_(raw) {}

CachingPool::~CachingPool() {
  for (auto& [event, block] : events_) raw_.destroy_event(event);
  for (Block* head : segments_) {
    size_t bytes = 0;
    for (Block* b = head; b;) {
      bytes += b->size;
      Block* next = b->next;
      if (b != head) delete b;
      b = next;
    }
    raw_.free(head->ptr, bytes);
    delete head;
  }
}

size_t CachingPool::round_size(size_t nbytes) {
  if (nbytes == 0) return kRound;  // a real block keeps allocate/free symmetric
  return (nbytes + kRound - 1) / kRound * kRound;
}

CachingPool::Block* CachingPool::find_free(size_t size, bool small, StreamId stream) {
  FreeSet& pool = small ? small_free_ : large_free_;
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingPool::Block* CachingPool::new_segment(size_t size, bool small, StreamId stream, const std::string& ctx) {
  const size_t bytes = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  std::string why;
  void* p = raw_.malloc(bytes, &why);
  if (!p) {
    // The device is full, but segments cached for other sizes or streams may make room: wait for all
    // work (so no event is pending and nothing cached is still in use), return them and retry once.
    ++stats_.num_alloc_retries;
    raw_.synchronize();
    process_events();
    release_unused_segments();
    why.clear();
    p = raw_.malloc(bytes, &why);
    if (!p) {
      ++stats_.num_ooms;
      fail(kCtx, device_, ": out of memory allocating ", ctx, " (a new segment of ", bytes_str(int64_t(bytes)),
           "; ", why, ") with ", bytes_str(stats_.allocated_bytes), " allocated by diffq, ",
           bytes_str(stats_.reserved_bytes), " reserved (segments held, after returning the unused ones), ",
           raw_.device_free_bytes() >= 0 ? bytes_str(raw_.device_free_bytes()) : std::string("unknown"),
           " free on the device");
    }
  }
  auto* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = bytes;
  b->stream = stream;
  b->small = small;
  segments_.insert(b);
  ++stats_.num_device_mallocs;
  stats_.reserved_bytes += int64_t(bytes);
  raise_peak(stats_.reserved_bytes, stats_.peak_reserved_bytes);
  return b;
}

// Keeps the first `size` bytes in b; the rest becomes a free block when a later request of the same
// pool could use it (a large remainder of at most 1 MiB would only ever serve small requests, which
// never come from the large pool, so it stays part of b as torch does).
void CachingPool::split(Block* b, size_t size) {
  const size_t rest = b->size - size;
  if (b->small ? rest < kRound : rest <= kSmallRequest) return;
  auto* r = new Block;
  r->ptr = b->ptr + size;
  r->size = rest;
  r->stream = b->stream;
  r->small = b->small;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  insert_free(r);
}

void* CachingPool::allocate(size_t nbytes, StreamId stream) {
  check(nbytes <= std::numeric_limits<size_t>::max() / 2, kCtx, device_, ": a request of ", nbytes,
        " bytes is beyond any device");
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallRequest;
  Block* b = find_free(size, small, stream);
  if (!b) b = new_segment(size, small, stream, bytes_str(int64_t(nbytes)));
  b->allocated = true;  // before split: the rest must not merge back into b
  split(b, size);
  b->requested = nbytes;
  live_.emplace(b->ptr, b);
  ++stats_.num_allocs;
  stats_.allocated_bytes += int64_t(b->size);
  stats_.requested_bytes += int64_t(nbytes);
  raise_peak(stats_.allocated_bytes, stats_.peak_allocated_bytes);
  raise_peak(stats_.requested_bytes, stats_.peak_requested_bytes);
  return b->ptr;
}

void CachingPool::insert_free(Block* b) {
  auto cached = [](const Block* n) { return n && !n->allocated && n->pending_events == 0; };
  // `a` takes over `n`, its free successor in the segment (a pool orders by size: a cached block leaves
  // its pool before it grows).
  auto absorb = [](Block* a, Block* n) {
    a->size += n->size;
    a->next = n->next;
    if (n->next) n->next->prev = a;
    delete n;
  };
  if (cached(b->prev)) {  // b merges into its predecessor
    Block* p = b->prev;
    pool_of(p).erase(p);
    absorb(p, b);
    b = p;
  }
  if (cached(b->next)) {
    pool_of(b->next).erase(b->next);
    absorb(b, b->next);
  }
  pool_of(b).insert(b);
}

void CachingPool::free(void* p) noexcept {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = live_.find(p);
  if (it == live_.end()) {
    std::fprintf(stderr, "[memory] %s: free of %p, which this allocator did not hand out (ignored)\n",
                 device_.c_str(), p);
    return;
  }
  Block* b = it->second;
  live_.erase(it);
  ++stats_.num_frees;
  stats_.allocated_bytes -= int64_t(b->size);
  stats_.requested_bytes -= int64_t(b->requested);
  b->allocated = false;
  b->requested = 0;
  // Work queued on the other streams may still use the block: it waits for an event on each.
  for (StreamId s : b->used_on) {
    if (void* ev = raw_.record_event(s)) {
      events_.emplace_back(ev, b);
      ++b->pending_events;
      continue;
    }
    try {  // no event: wait for the whole device instead
      raw_.synchronize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[memory] %s: %s\n", device_.c_str(), e.what());
    }
  }
  b->used_on.clear();
  if (b->pending_events > 0)
    ++stats_.pending_event_blocks;
  else
    insert_free(b);
}

void CachingPool::process_events() {
  if (events_.empty()) return;
  std::deque<std::pair<void*, Block*>> waiting;
  for (auto& [event, b] : events_) {
    if (!raw_.event_done(event)) {
      waiting.emplace_back(event, b);
      continue;
    }
    raw_.destroy_event(event);
    if (--b->pending_events == 0) {
      --stats_.pending_event_blocks;
      insert_free(b);
    }
  }
  events_.swap(waiting);
}

void CachingPool::record_stream(void* p, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = live_.find(p);
  check(it != live_.end(), kCtx, device_, ": record_stream of ", p,
        ", which is not the start of a live allocation of this allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->used_on.begin(), b->used_on.end(), stream) == b->used_on.end()) b->used_on.push_back(stream);
}

// A segment is unused when coalescing made it one cached block.
void CachingPool::release_unused_segments() {
  if (retain_segments_) return;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* b = *it;
    if (b->next || b->allocated || b->pending_events > 0) {
      ++it;
      continue;
    }
    pool_of(b).erase(b);
    raw_.free(b->ptr, b->size);
    ++stats_.num_device_frees;
    stats_.reserved_bytes -= int64_t(b->size);
    it = segments_.erase(it);
    delete b;
  }
}

void CachingPool::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  raw_.synchronize();  // every event recorded so far completes
  process_events();
  release_unused_segments();
}

bool CachingPool::owns(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(const_cast<void*>(p)) != 0;
}

void CachingPool::set_retain_segments(bool retain) {
  std::lock_guard<std::mutex> lock(mu_);
  retain_segments_ = retain;
}

PoolStats CachingPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_requested_bytes = stats_.requested_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace diffq::backend::cuda
