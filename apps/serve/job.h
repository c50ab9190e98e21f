// A job of `diffq serve`: what was asked (set at submission, then read-only) and how it is going (guarded by
// its store: the in-process queue's mutex, or refreshed from Redis).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diffq/pipeline.h"
#include "generate_request.h"

namespace diffq::serve {

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
  app::GenerateRequest request;    // as asked (what a Redis worker maps again, as make_job did)
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
  std::string worker;                           // Redis queue: the worker that runs / ran it
  int64_t attempts = 0;                         // Redis queue: times a worker started it
  std::atomic<bool> cancel_requested{false};
};

}  // namespace diffq::serve
