// The HTTP server: models and queue, auth, the error-body fallback, and the routes of each API.
#include "server.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "diffq/error.h"
#include "redis_job_store.h"
#include "server_state.h"
#include "web_assets.h"

namespace diffq::serve {

namespace {
std::filesystem::path fresh_results_dir() {
  const auto base = std::filesystem::temp_directory_path() / ("diffq-serve-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base);
  return base;
}

// The queue: in-process, or Redis shared with workers (and this process's own worker for role "all").
void make_queue(Server::State& s) {
  const ServeOptions& o = s.opt;
  const bool redis = !o.queue.empty();
  check(o.role == "api" || o.role == "worker" || o.role == "all", "serve", "--role must be api, worker or all, got '",
        o.role, "'");
  check(redis || o.role == "all", "serve", "--role ", o.role,
        " needs --queue redis://HOST:PORT (the in-process queue lives in one process)");
  const RedisUrl url = redis ? RedisUrl::parse(o.queue) : RedisUrl{};
  check(!redis || o.claim_after_s > 0, "serve", "--claim-after must be > 0 seconds, got ", o.claim_after_s);
  check(!redis || o.max_attempts >= 1, "serve", "--max-attempts must be >= 1, got ", o.max_attempts);
  s.models = std::make_unique<ModelRegistry>(o.models, o.load, o.max_memory_bytes, o.role != "api");
  if (!redis) {
    QueueOptions qo;
    qo.max_queue = o.max_queue;
    qo.keep_finished = o.keep_finished;
    qo.results_dir = o.results_dir;
    s.jobs = std::make_unique<JobQueue>(*s.models, qo);
    return;
  }
  if (o.role != "worker")
    s.jobs = std::make_unique<RedisJobStore>(RedisStoreOptions{url, o.max_queue, o.keep_finished, o.results_dir});
  if (o.role != "api") {
    WorkerOptions wo;
    wo.url = url;
    wo.name = o.worker_name;
    wo.claim_after_s = o.claim_after_s;
    wo.max_attempts = o.max_attempts;
    wo.results_dir = o.results_dir;
    wo.lora_dir = o.lora_dir;
    wo.limits = o.limits;
    s.worker = std::make_unique<RedisWorker>(*s.models, wo);
  }
}
}  // namespace

Server::Server(ServeOptions opt) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.opt = std::move(opt);
  if (s.opt.results_dir.empty()) s.opt.results_dir = fresh_results_dir();
  make_queue(s);
  if (!s.serves_http()) return;  // a worker: no HTTP

  auto& http = s.http;
  const int threads = s.opt.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  // httplib refuses far larger bodies itself; up to this the handlers answer 413 with a JSON error.
  http.set_payload_max_length(size_t(std::max<int64_t>(s.opt.max_body_bytes * 4, 1 << 20)));
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (s.opt.api_key.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // The page, its health check and CORS preflights are open; every API needs the key.
    if (req.method == "OPTIONS" || (req.method == "GET" && (req.path == "/health" || find_web_asset(req.path))))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string want = "Bearer " + s.opt.api_key;
    if (req.get_header_value("Authorization") == want) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401,
               req.has_header("Authorization") ? "wrong API key" : "missing API key (Authorization: Bearer KEY)",
               "Authorization");
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error body
    if (res.status == 404) send_error(res, 404, "no route " + req.method + " " + req.path);
    else if (res.status == 413) send_error(res, 413, "the body is too large", "body");
    else send_error(res, res.status, "HTTP error " + std::to_string(res.status));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const app::RequestError& e) {  // e.g. Redis unreachable: 503 naming it
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    } catch (...) {
      send_error(res, 500, "unknown error");
    }
  });
  add_openai_routes(s);
  add_a1111_routes(s);
  add_jobs_routes(s);
  add_misc_routes(s);
  add_page_routes(s);
}

Server::~Server() { stop(false); }

Server::State& Server::state() { return *s_; }
const std::filesystem::path& Server::results_dir() const { return s_->opt.results_dir; }

int Server::bind() {
  State& s = *s_;
  if (!s.serves_http()) return 0;
  if (s.opt.port == 0) s.port = s.http.bind_to_any_port(s.opt.host);
  else s.port = s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  check(s.port > 0, "serve", "cannot listen on ", s.opt.host, ":", s.opt.port, " (in use, or not an address here)");
  return s.port;
}

bool Server::listen_after_bind() {
  State& s = *s_;
  if (s.serves_http()) return s.http.listen_after_bind();
  std::unique_lock lk(s.stop_mu);
  s.stopped_cv.wait(lk, [&] { return s.stopping.load(); });
  return true;
}

std::string Server::banner() const {
  const State& s = *s_;
  const std::string models = cat(s.opt.models.size(), " model(s); results in ", s.opt.results_dir.string());
  const std::string queue = s.opt.queue.empty() ? "" : cat("; queue ", s.opt.queue, ", role ", s.opt.role);
  if (!s.serves_http()) return cat("worker taking jobs from ", s.opt.queue, " (", models, ")");
  return cat("listening on http://", s.opt.host, ":", s.port, "/ (", models, queue, ")");
}

bool Server::listen() {
  bind();
  return listen_after_bind();
}

int Server::port() const { return s_->port; }
bool Server::is_running() const { return s_->http.is_running(); }

void Server::stop(bool drain) {
  State& s = *s_;
  {
    std::lock_guard lk(s.stop_mu);
    if (s.stopping.exchange(true)) return;
    s.stopped_cv.notify_all();
  }
  if (s.jobs) s.jobs->shutdown(drain);  // refuses new jobs at once (503), then cancels or finishes the rest
  if (s.worker) s.worker->stop(drain);  // Redis: without drain its running job stays queued for another worker
  s.http.stop();
}

}  // namespace diffq::serve
