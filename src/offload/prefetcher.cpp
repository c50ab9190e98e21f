#include "offload/prefetcher.h"

namespace diffq::offload {

Prefetcher::Prefetcher() : worker_([this] { run(); }) {}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::shared_future<std::shared_ptr<PoolBuffer>> Prefetcher::submit(Job job) {
  std::packaged_task<std::shared_ptr<PoolBuffer>()> task(std::move(job));
  auto fut = task.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return fut;
}

void Prefetcher::run() {
  for (;;) {
    std::packaged_task<std::shared_ptr<PoolBuffer>()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // exceptions land in the future
  }
}

}  // namespace diffq::offload
