// The server's jobs: one FIFO queue, one worker that runs them one at a time (so each pipeline runs one
// generation at a time), per-job state and an event log that server-sent-event clients replay and follow.
// A job is never lost: it ends completed, failed or cancelled exactly once, and its result files are
// written atomically before it says completed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "diffq/pipeline.h"
#include "job.h"
#include "job_store.h"

namespace diffq::serve {

class ModelRegistry;

struct QueueOptions {
  int64_t max_queue = 64;          // queued jobs (not counting the running one); more -> 429
  int64_t keep_finished = 256;     // finished jobs kept (oldest dropped with their files)
  std::filesystem::path results_dir;
  bool write_png_metadata = true;
};

class JobQueue : public JobStore {
 public:
  JobQueue(ModelRegistry& models, QueueOptions opt);
  ~JobQueue() override;

  std::pair<std::shared_ptr<Job>, int64_t> submit(std::shared_ptr<Job> job) override;
  std::shared_ptr<Job> get(const std::string& id) const override;
  std::vector<std::shared_ptr<Job>> list() const override;
  std::shared_ptr<Job> running() const override;
  bool cancel(const std::string& id) override;
  bool wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const override;
  std::vector<JobEvent> events_since(const std::shared_ptr<Job>& job, size_t from, std::chrono::milliseconds timeout,
                                     bool& final) const override;
  nlohmann::json describe(const Job& job) const override;
  std::string preview_of(const Job& job) const override {
    std::lock_guard lk(mu_);
    return job.last_preview;
  }
  // 1-based place in the queue (0 when not queued; call with the lock held or from describe()).
  int64_t position(const Job& job) const;

  // Stops taking jobs; with `drain` finishes the queued and running ones, else cancels them. Then joins.
  void shutdown(bool drain) override;
  bool accepting() const override { return accepting_; }
  Counts counts() const override;
  int64_t max_queue() const override { return opt_.max_queue; }

 private:
  void worker();
  void run_job(const std::shared_ptr<Job>& job);
  void finish(const std::shared_ptr<Job>& job, JobStatus s, JobEvent ev);  // with mu_ held
  void push_event(Job& job, JobEvent ev);                                  // with mu_ held
  void forget_old_jobs();                                                  // with mu_ held

  ModelRegistry& models_;
  QueueOptions opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // queue changes, job events
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::string> order_;  // submission order (oldest first)
  Counts finished_counts_;
  std::atomic<bool> accepting_{true};
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace diffq::serve
