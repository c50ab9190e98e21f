// Where the routes submit, find, follow and cancel jobs: the in-process JobQueue (job_queue.h, the default)
// or Redis shared with worker processes (RedisJobStore, redis_job_store.h; `--queue redis://...`). The
// routes see one interface; a Job is a snapshot the store keeps current (get / wait_final refresh it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "job.h"

namespace diffq::serve {

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Enqueues; throws RequestError 429 when full, 503 when shutting down (or the store is unreachable).
  // Returns the job and its position (1 = next to run).
  virtual std::pair<std::shared_ptr<Job>, int64_t> submit(std::shared_ptr<Job> job) = 0;
  virtual std::shared_ptr<Job> get(const std::string& id) const = 0;
  virtual std::vector<std::shared_ptr<Job>> list() const = 0;  // newest first
  virtual std::shared_ptr<Job> running() const = 0;            // a running job (null when none)
  // Queued: cancelled at once; running: at its next step. False when unknown or already final.
  virtual bool cancel(const std::string& id) = 0;
  // Waits until the job is final (or `timeout`); true when final (the job then holds its results).
  virtual bool wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const = 0;
  // Events of `job` from index `from`, waiting up to `timeout` for at least one new one; `final` is set
  // when the job has ended and every event has been returned.
  virtual std::vector<JobEvent> events_since(const std::shared_ptr<Job>& job, size_t from,
                                             std::chrono::milliseconds timeout, bool& final) const = 0;
  // Snapshot of a job as the jobs API reports it.
  virtual nlohmann::json describe(const Job& job) const = 0;
  virtual std::string preview_of(const Job& job) const = 0;  // data: URL, "" when none

  // Stops taking jobs; with `drain` finishes the queued and running ones, else cancels them.
  virtual void shutdown(bool drain) = 0;
  virtual bool accepting() const = 0;
  // "" when the store works; else why not (/health answers 503 with it).
  virtual std::string unavailable_reason() const { return ""; }

  struct Counts {
    int64_t queued = 0, running = 0, completed = 0, failed = 0, cancelled = 0, submitted = 0;
    double step_seconds_sum = 0;
    int64_t step_count = 0;
    double queue_wait_sum = 0;
  };
  virtual Counts counts() const = 0;
  virtual int64_t max_queue() const = 0;
  // Extra Prometheus lines (Redis: one gauge per worker); "" for none.
  virtual std::string metrics_text() const { return ""; }
};

// The jobs API's description of `job` at `position` in the queue (0: not queued). Callers hold what
// guards the job's fields.
nlohmann::json describe_job(const Job& job, int64_t position);

}  // namespace diffq::serve
