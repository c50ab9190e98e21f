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

namespace diffq::serve {

class ModelRegistry;

enum class JobStatus { queued, running, completed, failed, cancelled };
const char* status_name(JobStatus s);
inline bool is_final(JobStatus s) { return s == JobStatus::completed || s == JobStatus::failed || s == JobStatus::cancelled; }

struct JobEvent {
  std::string name;   // queued | step | done | error | cancelled
  nlohmann::json data;
};

struct Job {
  using clock = std::chrono::steady_clock;
  // Set at submission, then read-only.
  std::string id, model, kind;     // kind: "image" | "video"
  GenerateParams params;           // validated (0 / nullopt = the pipeline's default)
  nlohmann::json params_json;      // the request as reported back
  std::string output_format = "png";  // images: png | jpeg | webp (videos: mp4)
  double fps = 16.0;
  int64_t preview_every = 0;       // 0: no previews
  // LoRA adapters ("loras": [{"name", "scale"}]): name -> file under the server's --lora-dir. The worker loads
  // each into the pipeline once (kept loaded, by name) and makes exactly these active with these scales.
  struct Lora {
    std::string name;
    std::filesystem::path file;
    double scale = 1.0;
  };
  std::vector<Lora> loras;
  std::chrono::system_clock::time_point created_wall;
  clock::time_point created;

  // Guarded by the queue's mutex.
  JobStatus status = JobStatus::queued;
  int64_t step = 0, steps = 0;
  std::optional<clock::time_point> started, finished;
  std::vector<double> step_seconds;
  std::string error;
  std::vector<std::filesystem::path> results;  // one file per output
  uint64_t seed_used = 0;
  GenerateParams used;                          // as run (defaults filled in)
  std::vector<JobEvent> events;
  std::string last_preview;                     // data:image/png;base64,... (A1111 current_image)
  std::atomic<bool> cancel_requested{false};
};

struct QueueOptions {
  int64_t max_queue = 64;          // queued jobs (not counting the running one); more -> 429
  int64_t keep_finished = 256;     // finished jobs kept (oldest dropped with their files)
  std::filesystem::path results_dir;
  bool write_png_metadata = true;
};

class JobQueue {
 public:
  JobQueue(ModelRegistry& models, QueueOptions opt);
  ~JobQueue();

  // Enqueues; throws RequestError 429 when full, 503 when shutting down. Returns the job and its position
  // (1 = next to run).
  std::pair<std::shared_ptr<Job>, int64_t> submit(std::shared_ptr<Job> job);
  std::shared_ptr<Job> get(const std::string& id) const;
  std::vector<std::shared_ptr<Job>> list() const;  // newest first
  std::shared_ptr<Job> running() const;
  // Queued: cancelled at once; running: at its next step. False when unknown or already final.
  bool cancel(const std::string& id);
  // Waits until the job is final (or `timeout`); true when final.
  bool wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const;
  // Events of `job` from index `from`, waiting up to `timeout` for at least one new one; `final` is set
  // when the job has ended and every event has been returned.
  std::vector<JobEvent> events_since(const std::shared_ptr<Job>& job, size_t from, std::chrono::milliseconds timeout,
                                     bool& final) const;
  // Snapshot of a job as the jobs API reports it.
  nlohmann::json describe(const Job& job) const;
  // The job's latest preview as a data: URL ("" when none).
  std::string preview_of(const Job& job) const {
    std::lock_guard lk(mu_);
    return job.last_preview;
  }
  // 1-based place in the queue (0 when not queued; call with the lock held or from describe()).
  int64_t position(const Job& job) const;

  // Stops taking jobs; with `drain` finishes the queued and running ones, else cancels them. Then joins.
  void shutdown(bool drain);
  bool accepting() const { return accepting_; }

  struct Counts {
    int64_t queued = 0, running = 0, completed = 0, failed = 0, cancelled = 0, submitted = 0;
    double step_seconds_sum = 0;
    int64_t step_count = 0;
    double queue_wait_sum = 0;
  };
  Counts counts() const;
  int64_t max_queue() const { return opt_.max_queue; }

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
  bool accepting_ = true, stop_ = false;
  std::thread worker_;
};

}  // namespace diffq::serve
