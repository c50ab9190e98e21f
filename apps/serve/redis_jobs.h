// How jobs live in Redis (shared by the API process, RedisJobStore, and the workers, RedisWorker):
//   diffq:jobs:<model>      stream per model, one entry {id} per job for that model; consumer group "workers".
//                           A worker reads the streams of the models it serves (-m), so a job goes to a
//                           worker that has its model (routing by model)
//   diffq:streams           set of the models that have a stream
//   diffq:job:<id>          hash: spec (job_codec.h), status, attempts, step, steps, error, results (file names),
//                           worker, cancel, used, timings, preview, created_ms / started_ms / finished_ms
//   diffq:job:<id>:events   stream of the job's events {name, data} (what SSE replays and follows)
//   diffq:job:<id>:final    the final status, SET once: whoever sets it first records the job's end
//   diffq:order             sorted set of job ids by submission time (GET /v1/jobs, forgetting old jobs)
//   diffq:running           set of the ids running now;  diffq:counts  hash of totals (/metrics)
//   diffq:worker:<name>     the worker's heartbeat record, expiring (worker_beat.h: /metrics and routing)
//   diffq:worker-names      set of the names of the workers that may have a record
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "job.h"
#include "redis_client.h"

namespace diffq::serve::redis_keys {
inline constexpr const char* kStreams = "diffq:streams";
inline std::string stream(const std::string& model) { return "diffq:jobs:" + model; }
inline constexpr const char* kGroup = "workers";
inline constexpr const char* kOrder = "diffq:order";
inline constexpr const char* kRunning = "diffq:running";
inline constexpr const char* kCounts = "diffq:counts";
inline constexpr const char* kWorkerNames = "diffq:worker-names";
inline std::string worker(const std::string& name) { return "diffq:worker:" + name; }
inline std::string job(const std::string& id) { return "diffq:job:" + id; }
inline std::string events(const std::string& id) { return job(id) + ":events"; }
inline std::string final_status(const std::string& id) { return job(id) + ":final"; }
}  // namespace diffq::serve::redis_keys

namespace diffq::serve {

int64_t now_ms();  // wall clock, milliseconds since the epoch

// Creates the stream of `model` and its consumer group when missing (an existing group is kept).
void ensure_group(RedisConnection& c, const std::string& model);

// Jobs of `model` no worker has taken yet (its stream's entries less those delivered and not acknowledged).
int64_t stream_waiting(RedisConnection& c, const std::string& model);
// The id of the last entry of `model`'s stream delivered to a worker ("0-0" when none).
std::string last_delivered_id(RedisConnection& c, const std::string& model);
// When the oldest job of `model` no worker has taken was queued (ms, Redis's clock); 0 when none waits.
int64_t oldest_waiting_ms(RedisConnection& c, const std::string& model);
// Every model that has a stream -> its jobs waiting (stream_waiting).
std::map<std::string, int64_t> waiting_by_model(RedisConnection& c);
int64_t redis_time_ms(RedisConnection& c);  // Redis's clock (TIME), ms since the epoch

// Appends an event to the job's event stream.
void push_redis_event(RedisConnection& c, const std::string& id, const JobEvent& ev);

// Records the job's end once: true for the caller that set it (its fields and event are written in one
// MULTI with the final key, under WATCH), false when the job had already ended.
bool finalize_redis_job(RedisConnection& c, const std::string& id, JobStatus status, const JobEvent& ev,
                        const std::map<std::string, std::string>& fields = {});

// The job's hash into `job` (status, progress, results under `results_dir`, timings); false when there is
// no such job. RedisUnavailable when the hash is not one of diffq's.
bool load_redis_job(RedisConnection& c, const std::string& id, Job& job, const std::filesystem::path& results_dir);

JobStatus parse_status(const std::string& s);  // unknown text -> queued

}  // namespace diffq::serve
