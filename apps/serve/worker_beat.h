// A Redis worker's heartbeat: who it is, the models it serves (-m) and has loaded, the job it runs, the jobs
// it ended and the queue it sees. Each worker writes its own record every second (and at once when it takes
// or ends a job) with a time to live, so a worker that stops reporting (killed, its machine or its Redis
// connection lost) drops out of /metrics and out of routing (routing.h) kBeatTtlMs later. Keys:
//   diffq:worker:<name>   JSON {name, serves, loaded, job, done, queue, seen_ms}, expires after kBeatTtlMs
//   diffq:worker-names    set of the names that may have a record (readers drop those whose record expired)
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "redis_client.h"

namespace diffq::serve {

inline constexpr int64_t kBeatEveryMs = 1000;  // a worker writes its record at least this often
inline constexpr int64_t kBeatTtlMs = 10000;   // a record not rewritten for this long is gone

struct WorkerBeat {
  std::string name;
  std::vector<std::string> serves;  // the models it was started with (-m)
  std::vector<std::string> loaded;  // those it has loaded now
  std::string job;                  // the job it runs; "" when idle
  int64_t done = 0;                 // jobs it ended since it started
  int64_t queue = 0;                // jobs waiting (not taken by any worker) for the models it serves
  int64_t seen_ms = 0;              // when it wrote the record (its wall clock, ms since the epoch)

  bool idle() const { return job.empty(); }
  bool has_loaded(const std::string& model) const;
  bool can_serve(const std::string& model) const;
  nlohmann::json to_json() const;
  // nullopt when `text` is not a worker record (not JSON, not an object, no name, a field of the wrong type).
  static std::optional<WorkerBeat> parse(const std::string& text);
};

// Writes `b` as its worker's record (SET with PX kBeatTtlMs, SADD its name).
void publish_beat(RedisConnection& c, const WorkerBeat& b);
// Removes the worker's record (a worker that stops cleanly).
void remove_beat(RedisConnection& c, const std::string& name);
// The records of the live workers, by name; names whose record expired are removed from the set, records
// that are not diffq's are skipped.
std::vector<WorkerBeat> live_beats(RedisConnection& c);

// /metrics' lines for the live workers (per worker: running, jobs ended, loaded models, each served model
// loaded or not, the queue it sees, seconds since its record) and the queue of each model's stream.
std::string workers_metrics_text(const std::vector<WorkerBeat>& live, const std::map<std::string, int64_t>& model_queue,
                                 int64_t now_ms);

}  // namespace diffq::serve
