// A worker process's side of the Redis queue (`diffq serve --queue redis://... --role worker|all`): takes
// jobs through the consumer group (XREADGROUP), first claiming any job a dead worker left pending longer
// than --claim-after (XAUTOCLAIM); runs each through the in-process queue's code path (job_runner.h);
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
  // The next job of a model this worker serves (-m): a job abandoned by a dead worker first, then a new one.
  bool take_one(RedisConnection& c);  // false when there was nothing to take
  void run(RedisConnection& c, const std::string& stream, const std::string& entry, const std::string& id);
  void heartbeat_loop();
  // This worker's line in diffq:workers. Only the job loop asks the registry which models are loaded (the
  // heartbeat must never wait on a model load, which holds the registry): `from_loop` refreshes that list.
  void report(RedisConnection& c, const std::string& job, bool from_loop);
  void sleep_for(std::chrono::milliseconds d);               // wakes early on stop

  ModelRegistry& models_;
  WorkerOptions opt_;
  std::atomic<bool> stop_{false}, abandon_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  // The stream, entry and job being run ("" when idle); guarded by mu_.
  std::string current_stream_, current_entry_, current_job_;
  std::atomic<int64_t> done_{0};
  std::vector<std::string> loaded_models_;  // as the job loop last saw them; guarded by mu_
  std::thread thread_, heartbeat_;
};

}  // namespace diffq::serve
