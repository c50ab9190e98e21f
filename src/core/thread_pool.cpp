#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "diffq/error.h"

namespace diffq::core {

namespace {

int default_threads() {
  if (const char* env = std::getenv("DIFFQ_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    check(end != env && *end == '\0' && v > 0 && v <= 1024, "threads",
          "DIFFQ_NUM_THREADS='", env, "' is not a positive integer");
    return int(v);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// A fixed pool of workers; one parallel_for at a time (nested calls run inline).
class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& f) {
    std::unique_lock<std::mutex> l(m_);
    job_ = &f;
    n_ = n;
    chunks_ = chunks;
    next_.store(0);
    pending_ = int(workers_.size());
    error_ = nullptr;
    ++generation_;
    l.unlock();
    cv_.notify_all();
    work();
    l.lock();
    done_cv_.wait(l, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      const int64_t b = n_ * c / chunks_, e = n_ * (c + 1) / chunks_;
      try {
        (*job_)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> l(m_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }
  void loop(int) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      l.unlock();
      work();
      l.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;
int g_requested = 0;
thread_local bool t_in_parallel = false;

Pool& pool() {
  std::lock_guard<std::mutex> l(g_pool_mutex);
  const int want = g_requested > 0 ? g_requested : default_threads();
  if (!g_pool || g_pool->size() != want) g_pool = std::make_unique<Pool>(want);
  return *g_pool;
}

}  // namespace

int num_threads() { return pool().size(); }

bool in_parallel_region() { return t_in_parallel; }

void set_num_threads(int n) {
  std::lock_guard<std::mutex> l(g_pool_mutex);
  g_requested = n;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (t_in_parallel || n < 2 * grain) {
    f(0, n);
    return;
  }
  Pool& p = pool();
  const int64_t chunks = std::min<int64_t>(n / grain, int64_t(p.size()) * 4);
  if (p.size() == 1 || chunks <= 1) {
    f(0, n);
    return;
  }
  static std::mutex one_at_a_time;
  std::unique_lock<std::mutex> busy(one_at_a_time, std::try_to_lock);
  if (!busy.owns_lock()) {  // another thread is using the pool: do it here
    f(0, n);
    return;
  }
  p.run(n, chunks, [&](int64_t b, int64_t e) {
    struct Flag {
      Flag() { t_in_parallel = true; }
      ~Flag() { t_in_parallel = false; }
    } flag;
    f(b, e);
  });
}

}  // namespace diffq::core
