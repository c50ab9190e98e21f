#include "redis_jobs.h"

#include <chrono>

#include "diffq/error.h"

namespace diffq::serve {

using nlohmann::json;
namespace keys = redis_keys;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void ensure_group(RedisConnection& c, const std::string& model) {
  const RedisReply r = c.command({"XGROUP", "CREATE", keys::stream(model), keys::kGroup, "0", "MKSTREAM"});
  if (r.is_error() && r.str.rfind("BUSYGROUP", 0) != 0)
    throw RedisUnavailable("Redis refused to create the consumer group: " + r.str);
  c.exec({"SADD", keys::kStreams, model});
}

void push_redis_event(RedisConnection& c, const std::string& id, const JobEvent& ev) {
  c.exec({"XADD", keys::events(id), "*", "name", ev.name,
          "data", ev.data.dump(-1, ' ', false, json::error_handler_t::replace)});
}

bool finalize_redis_job(RedisConnection& c, const std::string& id, JobStatus status, const JobEvent& ev,
                        const std::map<std::string, std::string>& fields) {
  const std::string fkey = keys::final_status(id);
  c.exec({"WATCH", fkey});
  if (c.exec({"EXISTS", fkey}).as_integer("EXISTS") != 0) {
    c.exec({"UNWATCH"});
    return false;
  }
  std::vector<std::string> hset = {"HSET", keys::job(id), "status", status_name(status), "finished_ms",
                                   std::to_string(now_ms())};
  for (const auto& [k, v] : fields) hset.push_back(k), hset.push_back(v);
  c.exec({"MULTI"});
  try {
    c.exec({"SET", fkey, status_name(status)});
    c.exec(hset);
    c.exec({"XADD", keys::events(id), "*", "name", ev.name, "data",
            ev.data.dump(-1, ' ', false, json::error_handler_t::replace)});
    c.exec({"HINCRBY", keys::kCounts, status_name(status), "1"});
    c.exec({"SREM", keys::kRunning, id});
  } catch (const RedisUnavailable&) {
    try {
      c.command({"DISCARD"});
    } catch (const RedisUnavailable&) {  // the connection is gone, and the transaction with it
    }
    throw;
  }
  const RedisReply r = c.exec({"EXEC"});
  return !r.is_nil();  // nil: another process set the final key first
}

JobStatus parse_status(const std::string& s) {
  for (JobStatus st : {JobStatus::running, JobStatus::completed, JobStatus::failed, JobStatus::cancelled})
    if (s == status_name(st)) return st;
  return JobStatus::queued;
}

namespace {
Job::clock::time_point steady_of(int64_t wall_ms) {
  // Another process's wall-clock time as this process's steady clock (for describe_job's durations).
  return Job::clock::now() - std::chrono::milliseconds(now_ms() - wall_ms);
}

json parse_stored(const std::string& text, const std::string& id, const char* field) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw RedisUnavailable(cat("Redis holds job ", id, " with a ", field, " that is not JSON"));
  return j;
}
}  // namespace

bool load_redis_job(RedisConnection& c, const std::string& id, Job& job, const std::filesystem::path& results_dir) {
  const auto& kv = c.exec({"HGETALL", keys::job(id)}).as_array("HGETALL");
  if (kv.empty()) return false;
  std::map<std::string, std::string> h;
  for (size_t i = 0; i + 1 < kv.size(); i += 2) h[kv[i].as_string("HGETALL")] = kv[i + 1].as_string("HGETALL");
  if (!h.count("spec")) throw RedisUnavailable(cat("Redis holds job ", id, " without its spec"));
  const json spec = parse_stored(h["spec"], id, "spec");
  if (!spec.is_object()) throw RedisUnavailable(cat("Redis holds job ", id, " with a spec that is not an object"));
  job.id = id;
  job.model = spec.value("model", "");
  job.kind = spec.value("kind", "image");
  job.output_format = spec.value("output_format", "png");
  job.params_json = spec.contains("params") && spec["params"].is_object() ? spec["params"] : json::object();
  job.status = parse_status(h["status"]);
  auto num = [&](const char* f) -> int64_t {
    try {
      return h.count(f) ? std::stoll(h[f]) : 0;
    } catch (const std::exception&) {
      throw RedisUnavailable(cat("Redis holds job ", id, " with a ", f, " that is not a number"));
    }
  };
  job.step = num("step");
  job.steps = num("steps");
  job.error = h["error"];
  job.cancel_requested = h["cancel"] == "1";
  if (const int64_t t = num("created_ms")) {
    job.created = steady_of(t);
    job.created_wall = std::chrono::system_clock::time_point(std::chrono::milliseconds(t));
  }
  if (const int64_t t = num("started_ms")) job.started = steady_of(t);
  if (const int64_t t = num("finished_ms"); t && is_final(job.status)) job.finished = steady_of(t);
  job.last_preview = h["preview"];
  job.results.clear();
  if (!h["results"].empty())
    for (const auto& f : parse_stored(h["results"], id, "results"))
      if (f.is_string()) job.results.push_back(results_dir / f.get<std::string>());
  if (!h["timings"].empty()) job.params_json["timings"] = parse_stored(h["timings"], id, "timings");
  if (!h["used"].empty()) {
    const json u = parse_stored(h["used"], id, "used");
    job.used.width = u.value("width", int64_t(0));
    job.used.height = u.value("height", int64_t(0));
    job.used.num_inference_steps = u.value("steps", int64_t(0));
    if (u.contains("guidance") && u["guidance"].is_number()) job.used.guidance_scale = u["guidance"].get<double>();
  }
  job.worker = h["worker"];
  job.attempts = num("attempts");
  return true;
}

}  // namespace diffq::serve
