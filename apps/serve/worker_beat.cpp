#include "worker_beat.h"

#include <algorithm>
#include <cstdio>

#include "redis_jobs.h"

namespace diffq::serve {

using nlohmann::json;
namespace keys = redis_keys;

bool WorkerBeat::has_loaded(const std::string& model) const {
  return std::find(loaded.begin(), loaded.end(), model) != loaded.end();
}

bool WorkerBeat::can_serve(const std::string& model) const {
  return std::find(serves.begin(), serves.end(), model) != serves.end();
}

json WorkerBeat::to_json() const {
  return {{"name", name}, {"serves", serves}, {"loaded", loaded}, {"job", job},
          {"done", done}, {"queue", queue},   {"seen_ms", seen_ms}};
}

std::optional<WorkerBeat> WorkerBeat::parse(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return std::nullopt;
  WorkerBeat b;
  b.name = j["name"].get<std::string>();
  auto strings = [&](const char* f, std::vector<std::string>& out) {
    if (!j.contains(f)) return true;
    if (!j[f].is_array()) return false;
    for (const auto& s : j[f]) {
      if (!s.is_string()) return false;
      out.push_back(s.get<std::string>());
    }
    return true;
  };
  auto integer = [&](const char* f, int64_t& out) {
    if (!j.contains(f)) return true;
    if (!j[f].is_number_integer()) return false;
    out = j[f].get<int64_t>();
    return true;
  };
  if (!strings("serves", b.serves) || !strings("loaded", b.loaded) || !integer("done", b.done) ||
      !integer("queue", b.queue) || !integer("seen_ms", b.seen_ms))
    return std::nullopt;
  if (j.contains("job")) {
    if (!j["job"].is_string()) return std::nullopt;
    b.job = j["job"].get<std::string>();
  }
  return b;
}

void publish_beat(RedisConnection& c, const WorkerBeat& b) {
  c.exec({"SET", keys::worker(b.name), b.to_json().dump(-1, ' ', false, json::error_handler_t::replace), "PX",
          std::to_string(kBeatTtlMs)});
  c.exec({"SADD", keys::kWorkerNames, b.name});
}

void remove_beat(RedisConnection& c, const std::string& name) {
  c.exec({"DEL", keys::worker(name)});
  c.exec({"SREM", keys::kWorkerNames, name});
}

std::vector<WorkerBeat> live_beats(RedisConnection& c) {
  std::vector<std::string> names;
  for (const auto& r : c.exec({"SMEMBERS", keys::kWorkerNames}).as_array("SMEMBERS"))
    names.push_back(r.as_string("SMEMBERS"));
  std::sort(names.begin(), names.end());
  std::vector<WorkerBeat> out;
  if (names.empty()) return out;
  std::vector<std::string> mget = {"MGET"};
  for (const auto& n : names) mget.push_back(keys::worker(n));
  const auto& records = c.exec(mget).as_array("MGET");
  if (records.size() != names.size()) throw RedisUnavailable("Redis answered MGET with a different number of values");
  for (size_t i = 0; i < names.size(); ++i) {
    if (records[i].is_nil()) {  // expired: the worker stopped reporting
      c.exec({"SREM", keys::kWorkerNames, names[i]});
      continue;
    }
    auto b = WorkerBeat::parse(records[i].as_string("MGET"));
    if (b && b->name == names[i]) out.push_back(std::move(*b));
  }
  return out;
}

namespace {
// A Prometheus label value: backslash, double quote and newline escaped as the text format asks.
std::string label_value(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
}  // namespace

std::string workers_metrics_text(const std::vector<WorkerBeat>& live, const std::map<std::string, int64_t>& model_queue,
                                 int64_t now_ms) {
  std::string running, done, nloaded, loaded, queue, seen;
  for (const auto& w : live) {
    const std::string wl = "worker=\"" + label_value(w.name) + "\"";
    running += "diffq_worker_running{" + wl + "} " + (w.idle() ? "0" : "1") + "\n";
    done += "diffq_worker_jobs_total{" + wl + "} " + std::to_string(w.done) + "\n";
    nloaded += "diffq_worker_models_loaded{" + wl + "} " + std::to_string(w.loaded.size()) + "\n";
    std::vector<std::string> models = w.serves;
    for (const auto& m : w.loaded)
      if (!w.can_serve(m)) models.push_back(m);
    for (const auto& m : models)
      loaded += "diffq_worker_model_loaded{" + wl + ",model=\"" + label_value(m) + "\"} " +
                (w.has_loaded(m) ? "1" : "0") + "\n";
    queue += "diffq_worker_queue_length{" + wl + "} " + std::to_string(w.queue) + "\n";
    seen += "diffq_worker_last_seen_seconds{" + wl + "} " + num(double(std::max<int64_t>(0, now_ms - w.seen_ms)) / 1000.0) + "\n";
  }
  std::string models;
  for (const auto& [m, n] : model_queue)
    models += "diffq_model_queue_length{model=\"" + label_value(m) + "\"} " + std::to_string(n) + "\n";
  std::string o;
  o += "# HELP diffq_model_queue_length Jobs of the model waiting for a worker.\n# TYPE diffq_model_queue_length gauge\n" +
       models;
  o += "# HELP diffq_workers Workers whose heartbeat is live (written within the last " +
       std::to_string(kBeatTtlMs / 1000) + " s).\n# TYPE diffq_workers gauge\ndiffq_workers " +
       std::to_string(live.size()) + "\n";
  if (live.empty()) return o;
  o += "# HELP diffq_worker_running Whether the worker runs a job now.\n# TYPE diffq_worker_running gauge\n" + running;
  o += "# HELP diffq_worker_jobs_total Jobs the worker ended since it started.\n# TYPE diffq_worker_jobs_total counter\n" + done;
  o += "# HELP diffq_worker_models_loaded Pipelines the worker has loaded.\n# TYPE diffq_worker_models_loaded gauge\n" + nloaded;
  o += "# HELP diffq_worker_model_loaded Whether the worker has the model loaded (one line per model it serves).\n"
       "# TYPE diffq_worker_model_loaded gauge\n" + loaded;
  o += "# HELP diffq_worker_queue_length Jobs waiting for the models the worker serves, as it last saw them.\n"
       "# TYPE diffq_worker_queue_length gauge\n" + queue;
  o += "# HELP diffq_worker_last_seen_seconds Seconds since the worker last reported.\n"
       "# TYPE diffq_worker_last_seen_seconds gauge\n" + seen;
  return o;
}

}  // namespace diffq::serve
