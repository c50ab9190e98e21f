// One background worker that runs fetch jobs in submission order (CPU: the prefetch thread that
// reads the next group from disk while the current one computes; the CUDA transport issues its
// side-stream copies from here too). A job's result or exception comes back through its future.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "offload/buffer_pool.h"

namespace diffq::offload {

class Prefetcher {
 public:
  using Job = std::function<std::shared_ptr<PoolBuffer>()>;
  Prefetcher();
  ~Prefetcher();  // finishes queued jobs, then joins
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  std::shared_future<std::shared_ptr<PoolBuffer>> submit(Job job);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<std::shared_ptr<PoolBuffer>()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace diffq::offload
