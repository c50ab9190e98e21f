// The API process's side of the Redis queue (`diffq serve --queue redis://... --role api|all`): jobs are
// XADDed to the shared stream for the workers' consumer group, their state and events read back from Redis
// (redis_jobs.h has the keys). Redis down or answering garbage: RedisUnavailable, an HTTP 503 naming Redis.
#pragma once

#include <atomic>
#include <filesystem>

#include "job_store.h"
#include "redis_client.h"

namespace diffq::serve {

struct RedisStoreOptions {
  RedisUrl url;
  int64_t max_queue = 64;          // jobs waiting in Redis (not yet taken by a worker); more -> 429
  int64_t keep_finished = 256;     // finished jobs kept in Redis (older ones forgotten with their files)
  std::filesystem::path results_dir;  // the folder the workers write to (shared)
};

class RedisJobStore : public JobStore {
 public:
  explicit RedisJobStore(RedisStoreOptions opt);

  std::pair<std::shared_ptr<Job>, int64_t> submit(std::shared_ptr<Job> job) override;
  std::shared_ptr<Job> get(const std::string& id) const override;
  std::vector<std::shared_ptr<Job>> list() const override;
  std::shared_ptr<Job> running() const override;
  bool cancel(const std::string& id) override;
  bool wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const override;
  std::vector<JobEvent> events_since(const std::shared_ptr<Job>& job, size_t from, std::chrono::milliseconds timeout,
                                     bool& final) const override;
  nlohmann::json describe(const Job& job) const override;
  std::string preview_of(const Job& job) const override { return job.last_preview; }
  void shutdown(bool) override { accepting_ = false; }  // the workers keep running the queued jobs
  bool accepting() const override { return accepting_; }
  std::string unavailable_reason() const override;
  Counts counts() const override;
  int64_t max_queue() const override { return opt_.max_queue; }
  std::string metrics_text() const override;

 private:
  int64_t waiting(RedisConnection& c) const;  // entries no worker has taken yet
  void forget_old_jobs(RedisConnection& c);
  RedisStoreOptions opt_;
  mutable RedisPool pool_;
  std::atomic<bool> accepting_{true};
};

}  // namespace diffq::serve
