// A worker process's side of the Redis queue (`diffq serve --queue redis://... --role worker|all`): takes
// jobs through the consumer group (XREADGROUP), first claiming any job a dead worker left pending longer
// than --claim-after (XAUTOCLAIM), then jobs of the models it has loaded, then (routing.h) a job of a model
// it serves but has not loaded when no idle worker has that model loaded; publishes its heartbeat record
// (worker_beat.h) for /metrics and the other workers' routing; runs each through the in-process queue's code path (job_runner.h);
// reports progress, previews and the end through Redis (redis_jobs.h); XACKs. A job is retried at most
// --max-attempts times, then failed with the reason. While it runs, a heartbeat keeps the job claimed;
// Redis down: the worker says so once and retries every second.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "generate_request.h"
#include "redis_client.h"
#include "worker_beat.h"

namespace diffq::serve {

class ModelRegistry;

struct WorkerOptions {
  RedisUrl url;
  std::string name;                 // the consumer name (unique per worker: default host-pid)
  double claim_after_s = 60;        // a job pending this long without a heartbeat is claimed by another
  int64_t max_attempts = 3;         // starts of one job before it fails
  std::filesystem::path results_dir;
  std::filesystem::path lora_dir;
  app::RequestLimits limits = app::RequestLimits::server_defaults();
  bool write_png_metadata = true;
};

class RedisWorker {
 public:
  RedisWorker(ModelRegistry& models, WorkerOptions opt);  // starts taking jobs
  ~RedisWorker();
  // drain: finish the running job, then stop; else stop it at its next step and leave it pending, for
  // another worker to claim after --claim-after. Joins.
  void stop(bool drain);
  static std::string default_name();  // <hostname>-<pid>

 private:
  void loop();
  // The next job of a model this worker serves (-m): a job abandoned by a dead worker first, then a cold job
  // (a model not loaded here) that waited past kRouteGraceMs, then a job of a loaded model, then a cold job
  // routing gives this worker; else it waits up to a second for a new job of a loaded model.
  bool take_one(RedisConnection& c);  // false when there was nothing to take
  // Takes one new job (never more) of one of `models`, trying their streams in turn from a different one each
  // time, and runs it; false when none has one.
  bool read_and_run(RedisConnection& c, const std::vector<std::string>& models);
  // Waits up to `ms` for a new entry in one of `models`' streams (XREAD: takes nothing).
  void wait_for_new(RedisConnection& c, const std::vector<std::string>& models, int64_t ms);
  // A job of one of `cold` (served, not loaded here, jobs waiting), when routing gives it to this worker
  // (`overdue_only`: only one that waited past kRouteGraceMs).
  bool take_cold(RedisConnection& c, const std::vector<std::string>& cold, bool overdue_only);
  void run(RedisConnection& c, const std::string& stream, const std::string& entry, const std::string& id);
  void heartbeat_loop();
  // Asks the registry which models are loaded (only the job loop does: the heartbeat must never wait on a
  // model load, which holds the registry) and keeps it for the heartbeat record.
  void refresh_loaded();
  WorkerBeat beat() const;  // this worker's record as it stands
  // Writes this worker's record (worker_beat.h). Serialized, so a record never replaces a newer one.
  void publish(RedisConnection& c);
  void sleep_for(std::chrono::milliseconds d);               // wakes early on stop

  ModelRegistry& models_;
  WorkerOptions opt_;
  std::atomic<bool> stop_{false}, abandon_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // The stream, entry and job being run ("" when idle); guarded by mu_.
  std::string current_stream_, current_entry_, current_job_;
  std::atomic<int64_t> done_{0};
  std::vector<std::string> served_;         // the models it serves (-m), fixed
  std::vector<std::string> loaded_models_;  // as the job loop last saw them; guarded by mu_
  int64_t queue_seen_ = 0;                  // jobs waiting for the served models, last seen; guarded by mu_
  std::mutex publish_mu_;                   // one record write at a time (job loop and heartbeat thread)
  bool removed_ = false;  // its record removed (stop)
  size_t next_stream_ = 0;  // read_and_run's first stream next time (job loop only)
  std::thread thread_, heartbeat_;
};

}  // namespace diffq::serve
