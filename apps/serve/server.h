// `diffq serve`: pipelines kept loaded behind HTTP APIs (OpenAI images, A1111 sdapi, diffq's jobs with
// server-sent events), a web page at `/`, /health and Prometheus /metrics. docs/serve.md has the API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "generate_request.h"
#include "model_registry.h"

namespace diffq::serve {

struct ServeOptions {
  std::vector<std::pair<std::string, std::filesystem::path>> models;  // name -> folder; first = default
  LoadOptions load;
  std::string host = "127.0.0.1";
  int port = 7860;                  // 0: any free port (tests)
  std::string api_key;              // "" = no auth
  int64_t max_queue = 64;
  int64_t max_memory_bytes = 0;     // 0: no budget (every model stays loaded)
  int64_t max_body_bytes = 1 << 20;
  int64_t keep_finished = 256;      // finished jobs remembered (and their result files)
  int64_t preview_every = 1;        // jobs' SSE preview every K steps (0: none)
  bool drain = false;               // on SIGINT/SIGTERM: finish queued and running jobs
  app::RequestLimits limits = app::RequestLimits::server_defaults();
  std::filesystem::path results_dir;  // "" = a fresh folder under the system temp dir
  int threads = 32;                   // HTTP worker threads (SSE streams and waiting sync calls hold one)
  std::filesystem::path lora_dir;     // requests' "loras" name files <name>.safetensors here ("" = none taken)
  // Scale-out (docs/serve.md, "Several workers on Redis"): "" = the in-process queue; redis://HOST:PORT[/DB]
  // = jobs through Redis, shared with worker processes.
  std::string queue;
  std::string role = "all";           // api (HTTP, enqueues) | worker (runs jobs, no HTTP) | all (both)
  double claim_after_s = 60;          // Redis: a dead worker's job is claimed by another after this long
  int64_t max_attempts = 3;           // Redis: starts of one job before it fails
  std::string worker_name;            // Redis: this worker's consumer name ("" = <hostname>-<pid>)
};

class Server {
 public:
  explicit Server(ServeOptions opt);  // loads the models that fit
  ~Server();
  // Binds and serves until stop(); returns false when binding failed. port() is known once listening.
  // A worker (role "worker") binds nothing: bind() returns 0 and listen_after_bind() waits for stop().
  bool listen();
  // Binds now (so port() is known), serving starts with listen_after_bind().
  int bind();
  bool listen_after_bind();
  int port() const;
  bool is_running() const;
  // Stops accepting jobs, cancels (or with drain finishes) the queued and running ones, then stops HTTP.
  void stop(bool drain);
  const std::filesystem::path& results_dir() const;
  // What the process says once started: where it listens, or which queue it works for.
  std::string banner() const;
  struct State;
  State& state();

 private:
  std::unique_ptr<State> s_;
};

}  // namespace diffq::serve
