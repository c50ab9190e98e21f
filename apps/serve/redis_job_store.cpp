#include "redis_job_store.h"

#include <algorithm>
#include <thread>

#include "diffq/error.h"
#include "job_codec.h"
#include "redis_jobs.h"
#include "worker_beat.h"

namespace diffq::serve {

using nlohmann::json;
namespace keys = redis_keys;

namespace {
bool is_final_event(const std::string& name) { return name == "done" || name == "error" || name == "cancelled"; }

std::vector<JobEvent> parse_events(const RedisReply& r, std::string& last_id) {
  std::vector<JobEvent> out;
  for (const auto& e : r.as_array("XRANGE")) {
    const auto& pair = e.as_array("XRANGE");
    if (pair.size() != 2) throw RedisUnavailable("Redis answered XRANGE with an entry that is not [id, fields]");
    last_id = pair[0].as_string("XRANGE");
    JobEvent ev;
    const auto& f = pair[1].as_array("XRANGE");
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      const std::string& k = f[i].as_string("XRANGE");
      if (k == "name") ev.name = f[i + 1].as_string("XRANGE");
      if (k == "data") ev.data = json::parse(f[i + 1].as_string("XRANGE"), nullptr, false);
    }
    if (ev.name.empty() || ev.data.is_discarded()) throw RedisUnavailable("Redis holds a job event that is not diffq's");
    out.push_back(std::move(ev));
  }
  return out;
}
}  // namespace

RedisJobStore::RedisJobStore(RedisStoreOptions opt) : opt_(std::move(opt)), pool_(opt_.url) {
  std::filesystem::create_directories(opt_.results_dir);
}

int64_t RedisJobStore::waiting(RedisConnection& c) const {
  int64_t waiting = 0;  // over every model's stream: entries not yet delivered to a worker
  for (const auto& [m, n] : waiting_by_model(c)) waiting += n;
  return waiting;
}

std::pair<std::shared_ptr<Job>, int64_t> RedisJobStore::submit(std::shared_ptr<Job> job) {
  if (!accepting_) throw app::RequestError(503, "", "the server is shutting down");
  auto c = pool_.get();
  ensure_group(*c, job->model);
  const int64_t queued = waiting(*c);
  if (queued >= opt_.max_queue)
    throw app::RequestError(429, "queue", cat("the queue is full (", queued, " jobs waiting)"), double(opt_.max_queue));
  const int64_t t = now_ms();
  job->created = Job::clock::now();
  job->created_wall = std::chrono::system_clock::time_point(std::chrono::milliseconds(t));
  job->status = JobStatus::queued;
  c->exec({"HSET", keys::job(job->id), "spec", job_spec(*job).dump(-1, ' ', false, json::error_handler_t::replace),
           "status", "queued", "attempts", "0", "step", "0", "steps", "0", "created_ms", std::to_string(t)});
  push_redis_event(*c, job->id, {"queued", {{"position", queued + 1}}});
  c->exec({"ZADD", keys::kOrder, std::to_string(t), job->id});
  c->exec({"HINCRBY", keys::kCounts, "submitted", "1"});
  c->exec({"XADD", keys::stream(job->model), "*", "id", job->id});  // last: a worker finds all above in place
  forget_old_jobs(*c);
  return {job, queued + 1};
}

void RedisJobStore::forget_old_jobs(RedisConnection& c) {
  const int64_t n = c.exec({"ZCARD", keys::kOrder}).as_integer("ZCARD");
  if (n <= opt_.keep_finished) return;
  const auto& old = c.exec({"ZRANGE", keys::kOrder, "0", std::to_string(n - opt_.keep_finished - 1)}).as_array("ZRANGE");
  for (const auto& r : old) {
    const std::string& id = r.as_string("ZRANGE");
    if (c.exec({"EXISTS", keys::final_status(id)}).as_integer("EXISTS") == 0) continue;  // still queued or running
    Job j;
    if (load_redis_job(c, id, j, opt_.results_dir)) {
      std::error_code ec;
      for (const auto& f : j.results) std::filesystem::remove(f, ec);
    }
    c.exec({"DEL", keys::job(id), keys::events(id), keys::final_status(id)});
    c.exec({"ZREM", keys::kOrder, id});
  }
}

std::shared_ptr<Job> RedisJobStore::get(const std::string& id) const {
  auto c = pool_.get();
  auto job = std::make_shared<Job>();
  if (!load_redis_job(*c, id, *job, opt_.results_dir)) return nullptr;
  return job;
}

std::vector<std::shared_ptr<Job>> RedisJobStore::list() const {
  std::vector<std::string> ids;
  {
    auto c = pool_.get();
    for (const auto& r : c->exec({"ZREVRANGE", keys::kOrder, "0", std::to_string(opt_.keep_finished + opt_.max_queue)})
                             .as_array("ZREVRANGE"))
      ids.push_back(r.as_string("ZREVRANGE"));
  }
  std::vector<std::shared_ptr<Job>> out;
  for (const auto& id : ids)
    if (auto j = get(id)) out.push_back(std::move(j));
  return out;
}

std::shared_ptr<Job> RedisJobStore::running() const {
  std::string id;
  {
    auto c = pool_.get();
    const RedisReply r = c->exec({"SRANDMEMBER", keys::kRunning});
    if (r.is_nil()) return nullptr;
    id = r.as_string("SRANDMEMBER");
  }
  return get(id);
}

bool RedisJobStore::cancel(const std::string& id) {
  auto c = pool_.get();
  Job j;
  if (!load_redis_job(*c, id, j, opt_.results_dir) || is_final(j.status)) return false;
  c->exec({"HSET", keys::job(id), "cancel", "1"});  // a running job's worker sees it at its next step
  if (j.status == JobStatus::queued)  // no worker has it yet (a worker that takes it now finds it final)
    finalize_redis_job(*c, id, JobStatus::cancelled, {"cancelled", {{"step", 0}}});
  return true;
}

bool RedisJobStore::wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const {
  const auto until = Job::clock::now() + timeout;
  for (;;) {
    {
      auto c = pool_.get();
      if (!load_redis_job(*c, job->id, *job, opt_.results_dir))
        throw app::RequestError(404, "id", "job " + job->id + " is no longer in the queue");
    }
    if (is_final(job->status)) return true;
    if (Job::clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<JobEvent> RedisJobStore::events_since(const std::shared_ptr<Job>& job, size_t from,
                                                  std::chrono::milliseconds timeout, bool& final) const {
  auto c = pool_.get();
  const std::string key = keys::events(job->id);
  std::string last = "0-0";
  auto all = parse_events(c->exec({"XRANGE", key, "-", "+"}), last);
  if (all.size() <= from && !(all.size() == from && !all.empty() && is_final_event(all.back().name))) {
    // Nothing new: wait for the next event (XREAD BLOCK), at most 5 s so a vanished Redis is noticed.
    const auto ms = std::clamp<int64_t>(timeout.count(), 1, 5000);
    c->exec({"XREAD", "BLOCK", std::to_string(ms), "STREAMS", key, last});
    all = parse_events(c->exec({"XRANGE", key, "-", "+"}), last);
  }
  final = !all.empty() && is_final_event(all.back().name);
  if (from >= all.size()) return {};
  return {all.begin() + std::ptrdiff_t(from), all.end()};
}

json RedisJobStore::describe(const Job& job) const {
  int64_t position = 0;
  if (job.status == JobStatus::queued) {
    // Entries after the group's last delivered one, up to this job's: its place in its model's queue.
    auto c = pool_.get();
    const std::string delivered = last_delivered_id(*c, job.model);
    const auto& entries = c->exec({"XRANGE", keys::stream(job.model), "(" + delivered, "+", "COUNT",
                                   std::to_string(opt_.max_queue + 1)}).as_array("XRANGE");
    for (const auto& e : entries) {
      ++position;
      const auto& pair = e.as_array("XRANGE");
      if (pair.size() == 2 && pair[1].type == RedisReply::Type::array && pair[1].elements.size() == 2 &&
          pair[1].elements[1].type == RedisReply::Type::string && pair[1].elements[1].str == job.id)
        break;
    }
  }
  json d = describe_job(job, position);
  if (!job.worker.empty()) d["worker"] = job.worker;
  d["attempts"] = job.attempts;
  return d;
}

std::string RedisJobStore::unavailable_reason() const {
  try {
    auto c = pool_.get();
    const RedisReply r = c->exec({"PING"});
    if (r.str != "PONG") return "Redis answered PING with \"" + r.str + "\"";
    return "";
  } catch (const RedisUnavailable& e) {
    return e.message;
  }
}

JobStore::Counts RedisJobStore::counts() const {
  auto c = pool_.get();
  Counts n;
  n.queued = waiting(*c);
  n.running = c->exec({"SCARD", keys::kRunning}).as_integer("SCARD");
  const auto& kv = c->exec({"HGETALL", keys::kCounts}).as_array("HGETALL");
  for (size_t i = 0; i + 1 < kv.size(); i += 2) {
    const std::string& k = kv[i].as_string("HGETALL");
    double v = 0;
    try {
      v = std::stod(kv[i + 1].as_string("HGETALL"));
    } catch (const std::exception&) {
      throw RedisUnavailable("Redis holds a count " + k + " that is not a number");
    }
    if (k == "completed") n.completed = int64_t(v);
    if (k == "failed") n.failed = int64_t(v);
    if (k == "cancelled") n.cancelled = int64_t(v);
    if (k == "submitted") n.submitted = int64_t(v);
    if (k == "step_seconds_sum") n.step_seconds_sum = v;
    if (k == "step_count") n.step_count = int64_t(v);
    if (k == "queue_wait_sum") n.queue_wait_sum = v;
  }
  return n;
}

std::string RedisJobStore::metrics_text() const {
  auto c = pool_.get();
  const auto live = live_beats(*c);
  return workers_metrics_text(live, waiting_by_model(*c), now_ms());
}

}  // namespace diffq::serve
