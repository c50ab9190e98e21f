#include "redis_worker.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "job_codec.h"
#include "job_runner.h"
#include "model_registry.h"
#include "redis_jobs.h"
#include "routing.h"

namespace diffq::serve {

using nlohmann::json;
namespace keys = redis_keys;

namespace {
struct Abandoned {};  // the worker stops without --drain: the job stays pending for another worker

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// An entry [id, [field, value, ...]] -> {entry id, job id}; job id "" when the entry is not a job's.
std::pair<std::string, std::string> entry_of(const RedisReply& e) {
  const auto& pair = e.as_array("a stream entry");
  if (pair.size() != 2) throw RedisUnavailable("Redis answered a stream entry that is not [id, fields]");
  std::string job;
  if (pair[1].type == RedisReply::Type::array)
    for (size_t i = 0; i + 1 < pair[1].elements.size(); i += 2)
      if (pair[1].elements[i].str == "id") job = pair[1].elements[i + 1].str;
  return {pair[0].as_string("a stream entry"), job};
}
}  // namespace

std::string RedisWorker::default_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "worker");
  return cat(host, "-", ::getpid());
}

RedisWorker::RedisWorker(ModelRegistry& models, WorkerOptions opt) : models_(models), opt_(std::move(opt)) {
  if (opt_.name.empty()) opt_.name = default_name();
  served_ = models_.names();
  std::filesystem::create_directories(opt_.results_dir);
  thread_ = std::thread([this] { loop(); });
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

RedisWorker::~RedisWorker() { stop(false); }

void RedisWorker::stop(bool drain) {
  if (!drain) abandon_ = true;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (removed_) return;
  removed_ = true;
  try {  // off /metrics and out of routing at once (else when its record expires)
    RedisConnection c(opt_.url);
    remove_beat(c, opt_.name);
  } catch (const RedisUnavailable&) {
  }
}

void RedisWorker::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, d, [&] { return stop_.load(); });
}

void RedisWorker::refresh_loaded() {
  std::vector<std::string> loaded;
  for (const auto& m : models_.list())
    if (m.value("loaded", false)) loaded.push_back(m["id"].get<std::string>());
  std::lock_guard lk(mu_);
  loaded_models_ = std::move(loaded);
}

WorkerBeat RedisWorker::beat() const {
  WorkerBeat b;
  b.name = opt_.name;
  b.serves = served_;
  b.done = done_.load();
  b.seen_ms = now_ms();
  std::lock_guard lk(mu_);
  b.loaded = loaded_models_;
  b.job = current_job_;
  b.queue = queue_seen_;
  return b;
}

void RedisWorker::publish(RedisConnection& c) {
  std::lock_guard lk(publish_mu_);
  publish_beat(c, beat());
}

void RedisWorker::loop() {
  RedisConnection c(opt_.url);
  bool down = false;
  while (!stop_) {
    try {
      for (const std::string& m : served_) ensure_group(c, m);
      refresh_loaded();
      publish(c);
      if (down) std::fprintf(stderr, "serve: worker %s: Redis at %s is back\n", opt_.name.c_str(), opt_.url.text.c_str());
      down = false;
      while (!stop_ && take_one(c)) {
      }
    } catch (const RedisUnavailable& e) {
      if (!down)
        std::fprintf(stderr, "serve: worker %s: %s; retrying every second\n", opt_.name.c_str(), e.message.c_str());
      down = true;
      sleep_for(std::chrono::milliseconds(1000));
    }
  }
}

bool RedisWorker::take_one(RedisConnection& c) {
  // A job another worker left pending longer than --claim-after (it died, or lost Redis) comes first, from
  // the streams of the models this worker serves, whether loaded here or not.
  const auto claim_ms = std::to_string(int64_t(opt_.claim_after_s * 1000));
  for (const std::string& m : served_) {
    const std::string stream = keys::stream(m);
    const RedisReply a = c.exec({"XAUTOCLAIM", stream, keys::kGroup, opt_.name, claim_ms, "0-0", "COUNT", "1"});
    const auto& ar = a.as_array("XAUTOCLAIM");
    if (ar.size() >= 2)
      for (const auto& e : ar[1].as_array("XAUTOCLAIM")) {
        if (e.type != RedisReply::Type::array) continue;
        const auto [entry, id] = entry_of(e);
        std::fprintf(stderr, "serve: worker %s: claimed job %s (its worker stopped)\n", opt_.name.c_str(), id.c_str());
        run(c, stream, entry, id);
        return true;
      }
  }
  refresh_loaded();
  std::vector<std::string> loaded, cold;  // served models loaded here; served, not loaded, with jobs waiting
  int64_t queue = 0;
  {
    std::vector<std::pair<std::string, int64_t>> waiting;
    for (const std::string& m : served_) waiting.emplace_back(m, stream_waiting(c, m));
    std::lock_guard lk(mu_);
    for (const auto& [m, n] : waiting) {
      queue += n;
      const bool here = std::find(loaded_models_.begin(), loaded_models_.end(), m) != loaded_models_.end();
      if (here) loaded.push_back(m);
      else if (n > 0) cold.push_back(m);
    }
    queue_seen_ = queue;
  }
  publish(c);  // idle, with what it has loaded: what the other workers' routing reads
  if (take_cold(c, cold, true)) return true;
  if (read_and_run(c, loaded)) return true;
  if (take_cold(c, cold, false)) return true;
  // Nothing for now: wait up to a second for a new job of a loaded model, then look at every stream again.
  if (loaded.empty()) sleep_for(std::chrono::milliseconds(500));
  else wait_for_new(c, loaded, 1000);
  return false;
}

bool RedisWorker::read_and_run(RedisConnection& c, const std::vector<std::string>& models) {
  // One stream per XREADGROUP: with several streams Redis hands out an entry of each, and a job handed to this
  // worker is its own until it ends it (no other worker could take the others meanwhile).
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string stream = keys::stream(models[(next_stream_ + i) % models.size()]);
    const RedisReply r = c.exec({"XREADGROUP", "GROUP", keys::kGroup, opt_.name, "COUNT", "1", "STREAMS", stream, ">"});
    if (r.is_nil()) continue;
    next_stream_ = (next_stream_ + i + 1) % models.size();  // the next look starts at the following stream
    bool ran = false;
    for (const auto& s : r.as_array("XREADGROUP")) {
      const auto& sv = s.as_array("XREADGROUP");
      if (sv.size() != 2) throw RedisUnavailable("Redis answered XREADGROUP with a stream that is not [name, entries]");
      for (const auto& e : sv[1].as_array("XREADGROUP")) {
        const auto [entry, id] = entry_of(e);
        run(c, stream, entry, id);
        ran = true;
      }
    }
    if (ran) return true;
  }
  return false;
}

void RedisWorker::wait_for_new(RedisConnection& c, const std::vector<std::string>& models, int64_t ms) {
  std::vector<std::string> cmd = {"XREAD", "COUNT", "1", "BLOCK", std::to_string(ms), "STREAMS"};
  for (const std::string& m : models) cmd.push_back(keys::stream(m));
  for (size_t i = 0; i < models.size(); ++i) cmd.push_back("$");
  c.exec(cmd);
}

bool RedisWorker::take_cold(RedisConnection& c, const std::vector<std::string>& cold, bool overdue_only) {
  if (cold.empty()) return false;
  const int64_t now = redis_time_ms(c);
  std::vector<WorkerBeat> live;
  std::map<std::string, int64_t> waiting;
  bool read_beats = false;
  for (const std::string& m : cold) {
    const int64_t oldest = oldest_waiting_ms(c, m);
    if (oldest == 0) continue;  // taken meanwhile
    const bool overdue = now - oldest > kRouteGraceMs;
    if (overdue_only && !overdue) continue;
    std::string why = cat("it waited over ", kRouteGraceMs / 1000, " s");
    if (!overdue) {
      if (!read_beats) {
        live = live_beats(c);
        waiting = waiting_by_model(c);
        read_beats = true;
      }
      const ColdRoute r = route_cold(beat(), m, live, waiting);
      if (!r.take) continue;  // left to another worker
      why = r.why;
    }
    std::fprintf(stderr, "serve: worker %s: taking a job of %s, not loaded here (%s)\n", opt_.name.c_str(), m.c_str(),
                 why.c_str());
    if (read_and_run(c, {m})) return true;
  }
  return false;
}

void RedisWorker::run(RedisConnection& c, const std::string& stream, const std::string& entry, const std::string& id) {
  auto ack = [&] {
    c.exec({"XACK", stream, keys::kGroup, entry});
    c.exec({"XDEL", stream, entry});
  };
  if (id.empty() || c.exec({"EXISTS", keys::final_status(id)}).as_integer("EXISTS") != 0) return ack();
  const RedisReply spec_text = c.exec({"HGET", keys::job(id), "spec"});
  if (spec_text.is_nil()) return ack();  // forgotten
  const int64_t attempt = c.exec({"HINCRBY", keys::job(id), "attempts", "1"}).as_integer("HINCRBY");
  if (attempt > opt_.max_attempts) {
    const RedisReply last = c.exec({"HGET", keys::job(id), "worker"});
    const std::string msg = cat("gave up after ", opt_.max_attempts, " attempt(s): the worker running it stopped",
                                " before it finished (last: ", last.is_nil() ? "?" : last.str, ")");
    finalize_redis_job(c, id, JobStatus::failed, {"error", {{"message", msg}}}, {{"error", msg}});
    return ack();
  }
  const int64_t started = now_ms();
  c.exec({"HSET", keys::job(id), "status", "running", "worker", opt_.name, "started_ms", std::to_string(started),
          "step", "0"});
  if (attempt == 1)
    if (const RedisReply created = c.exec({"HGET", keys::job(id), "created_ms"}); !created.is_nil())
      c.exec({"HINCRBYFLOAT", keys::kCounts, "queue_wait_sum",
              std::to_string(double(started - std::atoll(created.str.c_str())) / 1000.0)});
  c.exec({"SADD", keys::kRunning, id});
  {
    std::lock_guard lk(mu_);
    current_stream_ = stream;
    current_entry_ = entry;
    current_job_ = id;
  }
  publish(c);  // busy
  struct Idle {  // the heartbeat stops with the job, however it ends
    RedisWorker& w;
    ~Idle() {
      std::lock_guard lk(w.mu_);
      w.current_entry_.clear();
      w.current_job_.clear();
    }
  } idle{*this};
  int64_t step_reached = 0;
  bool ended = false;
  try {
    const json spec = json::parse(spec_text.as_string("HGET spec"), nullptr, false);
    const auto job = job_from_spec(spec, opt_.limits, opt_.lora_dir);
    RunHooks hooks;
    hooks.on_start = [&](int64_t steps) {
      c.exec({"HSET", keys::job(id), "steps", std::to_string(steps)});
      refresh_loaded();  // the model is loaded now (it may have been loaded for this job)
      publish(c);
    };
    hooks.on_step = [&](JobEvent ev, int64_t step, int64_t steps, double dt) {
      step_reached = step;
      c.exec({"HSET", keys::job(id), "step", std::to_string(step), "steps", std::to_string(steps)});
      push_redis_event(c, id, ev);
      c.exec({"HINCRBYFLOAT", keys::kCounts, "step_seconds_sum", std::to_string(dt)});
      c.exec({"HINCRBY", keys::kCounts, "step_count", "1"});
      if (abandon_) throw Abandoned{};
      if (c.exec({"HGET", keys::job(id), "cancel"}).str == "1") throw JobCancelled{};
    };
    hooks.on_preview = [&](const std::string& url) { c.exec({"HSET", keys::job(id), "preview", url}); };
    RunOutput out = run_job_generation(models_, *job, opt_.results_dir, opt_.write_png_metadata, hooks);
    json names = json::array();
    for (const auto& f : out.files) names.push_back(f.filename().string());
    json used = {{"width", out.used.width}, {"height", out.used.height}, {"steps", out.used.num_inference_steps}};
    if (out.used.guidance_scale) used["guidance"] = *out.used.guidance_scale;
    ended = finalize_redis_job(c, id, JobStatus::completed,
                               {"done", {{"result_url", "/v1/jobs/" + id + "/result"}, {"outputs", int64_t(out.files.size())}}},
                               {{"results", dump(names)}, {"used", dump(used)}, {"timings", dump(out.timings)}});
  } catch (const Abandoned&) {
    std::fprintf(stderr, "serve: worker %s: stopping; job %s stays queued for another worker\n", opt_.name.c_str(),
                 id.c_str());
    c.command({"SREM", keys::kRunning, id});
    return;  // not acknowledged: another worker claims it after --claim-after
  } catch (const JobCancelled&) {
    ended = finalize_redis_job(c, id, JobStatus::cancelled, {"cancelled", {{"step", step_reached}}});
  } catch (const RedisUnavailable&) {
    throw;  // not acknowledged: claimed again (by this worker or another) once Redis answers
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    ended = finalize_redis_job(c, id, JobStatus::failed, {"error", {{"message", msg}}}, {{"error", msg}});
  }
  if (!ended) c.exec({"SREM", keys::kRunning, id});  // another worker recorded its end first
  ++done_;
  ack();
  {
    std::lock_guard lk(mu_);
    current_entry_.clear();
    current_job_.clear();
  }
  refresh_loaded();
  publish(c);  // idle again
  return_freed_memory_to_os();
}

void RedisWorker::heartbeat_loop() {
  // Every second: this worker's record (alive, idle or busy). While a job runs, its entry is also claimed
  // again (XCLAIM, min-idle 0) every min(--claim-after/4, 5) s, which resets its idle time, so no other
  // worker's XAUTOCLAIM takes it while this one is alive, however long a step or a model load takes.
  RedisConnection c(opt_.url);
  const auto claim_every =
      std::chrono::milliseconds(std::clamp<int64_t>(int64_t(opt_.claim_after_s * 1000 / 4), 100, 5000));
  const auto tick = std::min(claim_every, std::chrono::milliseconds(kBeatEveryMs));
  auto last_claim = std::chrono::steady_clock::time_point{};
  while (!stop_) {
    std::string stream, entry;
    {
      std::lock_guard lk(mu_);
      stream = current_stream_;
      entry = current_entry_;
    }
    try {
      if (!entry.empty() && std::chrono::steady_clock::now() - last_claim >= claim_every) {
        c.exec({"XCLAIM", stream, keys::kGroup, opt_.name, "0", entry, "JUSTID"});
        last_claim = std::chrono::steady_clock::now();
      }
      publish(c);
    } catch (const RedisUnavailable&) {  // the job loop reports Redis being down
    }
    sleep_for(tick);
  }
}

}  // namespace diffq::serve
