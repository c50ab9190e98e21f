// What the route files share: the HTTP server, the queue, the models, the options, and the helpers that
// turn requests into jobs and errors into JSON ({"error": {"message", "field", "limit"}}).
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "generate_request.h"
#include "job_queue.h"
#include "job_store.h"
#include "model_registry.h"
#include "redis_worker.h"
#include "server.h"

namespace diffq::serve {

struct Server::State {
  ServeOptions opt;
  std::unique_ptr<ModelRegistry> models;
  std::unique_ptr<JobStore> jobs;      // null for a worker (role "worker")
  std::unique_ptr<RedisWorker> worker;  // Redis roles worker and all
  httplib::Server http;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;                   // a worker's listen_after_bind() waits on stopped_cv
  std::condition_variable stopped_cv;
  bool serves_http() const { return jobs != nullptr; }
};

// ---- responses ----
void send_json(httplib::Response& res, int status, const nlohmann::json& j);
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& field = "",
                std::optional<double> limit = std::nullopt);
void send_error(httplib::Response& res, const app::RequestError& e);
// Runs `fn`, turning RequestError / diffq::Error / JSON errors into the JSON error responses.
void guarded(httplib::Response& res, const std::function<void()>& fn);

// ---- request bodies ----
// The body as a JSON object: 413 (field "body") over the limit, 400 when malformed or not an object.
nlohmann::json parse_body(const httplib::Request& req, int64_t max_body);
// The byte offset of the first byte of `s` that is not well-formed UTF-8 (RFC 3629: no overlong forms,
// surrogates or code points past U+10FFFF), std::string::npos when all of it is.
size_t first_invalid_utf8(std::string_view s);
// Typed fields: absent or null -> nullopt; the wrong type -> RequestError 400 naming the field.
std::optional<std::string> get_string(const nlohmann::json& j, const char* field);
std::optional<int64_t> get_int(const nlohmann::json& j, const char* field);
std::optional<double> get_number(const nlohmann::json& j, const char* field);
std::optional<bool> get_bool(const nlohmann::json& j, const char* field);
// A seed: a non-negative integer; -1 (A1111) or absent with `random_if_absent` -> a random one.
uint64_t get_seed(const nlohmann::json& j, const char* field, bool random_if_absent);

// ---- jobs ----
// A job for model `model` ("" = the default) with the validated request; throws RequestError.
// `fields` renames the shared mapping's field names to the API's own in errors (A1111: n -> batch_size).
std::shared_ptr<Job> make_job(Server::State& s, const std::string& model, const app::GenerateRequest& r,
                              const nlohmann::json& params_json, const std::string& output_format = "png",
                              const std::map<std::string, std::string>& fields = {});
std::string read_file(const std::filesystem::path& p);
// The body's "loras": [{"name": "style", "scale": 0.8}, ...] as the job's adapters: each name a file
// <name>.safetensors in --lora-dir (no path separators); RequestError 400/422 naming "loras" otherwise.
std::vector<Job::Lora> get_loras(const Server::State& s, const nlohmann::json& body);

// ---- routes (one file each) ----
void add_openai_routes(Server::State& s);  // routes_openai.cpp
void add_a1111_routes(Server::State& s);   // routes_a1111.cpp
void add_jobs_routes(Server::State& s);    // routes_jobs.cpp
void add_misc_routes(Server::State& s);    // metrics.cpp: /health, /metrics, /v1/models
void add_page_routes(Server::State& s);    // page.cpp: the web page (/, /app.js, /style.css)

}  // namespace diffq::serve
