#include "redis_jobs.h"

#include <algorithm>
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

int64_t stream_waiting(RedisConnection& c, const std::string& model) {
  const std::string s = keys::stream(model);
  const int64_t len = c.exec({"XLEN", s}).as_integer("XLEN");
  const RedisReply p = c.command({"XPENDING", s, keys::kGroup});  // an error when the group is not there yet
  const int64_t pending =
      p.type == RedisReply::Type::array && !p.elements.empty() ? p.elements[0].as_integer("XPENDING") : 0;
  return std::max<int64_t>(0, len - pending);
}

std::string last_delivered_id(RedisConnection& c, const std::string& model) {
  std::string delivered = "0-0";
  const RedisReply g = c.command({"XINFO", "GROUPS", keys::stream(model)});
  if (g.type == RedisReply::Type::array)
    for (const auto& grp : g.elements) {
      const auto& f = grp.as_array("XINFO GROUPS");
      bool ours = false;
      std::string last;
      for (size_t i = 0; i + 1 < f.size(); i += 2)
        if (f[i].type == RedisReply::Type::string) {
          if (f[i].str == "name") ours = f[i + 1].type == RedisReply::Type::string && f[i + 1].str == keys::kGroup;
          if (f[i].str == "last-delivered-id") last = f[i + 1].as_string("XINFO GROUPS");
        }
      if (ours && !last.empty()) delivered = last;
    }
  return delivered;
}

int64_t oldest_waiting_ms(RedisConnection& c, const std::string& model) {
  std::string after = "(";  // exclusive
  after += last_delivered_id(c, model);
  const auto& e = c.exec({"XRANGE", keys::stream(model), after, "+", "COUNT", "1"}).as_array("XRANGE");
  if (e.empty()) return 0;
  const auto& pair = e.front().as_array("XRANGE");
  if (pair.empty()) throw RedisUnavailable("Redis answered XRANGE with an empty entry");
  const std::string& id = pair[0].as_string("XRANGE");  // <ms>-<seq>
  try {
    return std::stoll(id.substr(0, id.find('-')));
  } catch (const std::exception&) {
    throw RedisUnavailable("Redis answered XRANGE with an entry id that is not <ms>-<seq>: " + id);
  }
}

std::map<std::string, int64_t> waiting_by_model(RedisConnection& c) {
  std::map<std::string, int64_t> out;
  for (const auto& m : c.exec({"SMEMBERS", keys::kStreams}).as_array("SMEMBERS")) {
    const std::string& name = m.as_string("SMEMBERS");
    out[name] = stream_waiting(c, name);
  }
  return out;
}

int64_t redis_time_ms(RedisConnection& c) {
  const auto& t = c.exec({"TIME"}).as_array("TIME");
  if (t.size() != 2) throw RedisUnavailable("Redis answered TIME with something else than [seconds, microseconds]");
  try {
    return std::stoll(t[0].as_string("TIME")) * 1000 + std::stoll(t[1].as_string("TIME")) / 1000;
  } catch (const std::exception&) {
    throw RedisUnavailable("Redis answered TIME with something else than numbers");
  }
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
