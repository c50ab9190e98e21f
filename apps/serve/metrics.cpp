// GET /health, GET /metrics (Prometheus text format 0.0.4), GET /v1/models (the page: page.cpp).
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "diffq/memory.h"
#include "server_state.h"

namespace diffq::serve {

using nlohmann::json;

namespace {
int64_t current_rss_bytes() {
  long pages = 0, rss = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return int64_t(rss) * int64_t(sysconf(_SC_PAGESIZE));
}

std::string prometheus(Server::State& s) {
  const auto c = s.jobs->counts();
  const auto mem = memory_stats(Device::cpu());
  std::ostringstream o;
  o << "# HELP diffq_queue_length Jobs waiting to run.\n# TYPE diffq_queue_length gauge\n"
    << "diffq_queue_length " << c.queued << "\n";
  o << "# HELP diffq_queue_capacity Most jobs that may wait (--max-queue).\n# TYPE diffq_queue_capacity gauge\n"
    << "diffq_queue_capacity " << s.jobs->max_queue() << "\n";
  o << "# HELP diffq_jobs Jobs by state (current for queued/running, totals for the final states).\n"
    << "# TYPE diffq_jobs gauge\n";
  for (const auto& [state, n] : {std::pair<const char*, int64_t>{"queued", c.queued}, {"running", c.running},
                                 {"completed", c.completed}, {"failed", c.failed}, {"cancelled", c.cancelled}})
    o << "diffq_jobs{state=\"" << state << "\"} " << n << "\n";
  o << "# HELP diffq_jobs_submitted_total Jobs accepted since start.\n# TYPE diffq_jobs_submitted_total counter\n"
    << "diffq_jobs_submitted_total " << c.submitted << "\n";
  o << "# HELP diffq_step_seconds Denoising step wall time.\n# TYPE diffq_step_seconds summary\n"
    << "diffq_step_seconds_sum " << c.step_seconds_sum << "\n"
    << "diffq_step_seconds_count " << c.step_count << "\n";
  o << "# HELP diffq_queue_wait_seconds_sum Time jobs waited before running, summed.\n"
    << "# TYPE diffq_queue_wait_seconds_sum counter\ndiffq_queue_wait_seconds_sum " << c.queue_wait_sum << "\n";
  o << "# HELP diffq_memory_bytes diffq's CPU allocator (current and peak) and the process peak RSS.\n"
    << "# TYPE diffq_memory_bytes gauge\n"
    << "diffq_memory_bytes{kind=\"allocator_current\"} " << mem.current_bytes << "\n"
    << "diffq_memory_bytes{kind=\"allocator_peak\"} " << mem.peak_bytes << "\n"
    << "diffq_memory_bytes{kind=\"process_peak_rss\"} " << process_peak_rss_bytes() << "\n"
    << "diffq_memory_bytes{kind=\"process_rss\"} " << current_rss_bytes() << "\n";
  o << "# HELP diffq_models_loaded_bytes Weight bytes of the loaded pipelines.\n# TYPE diffq_models_loaded_bytes gauge\n"
    << "diffq_models_loaded_bytes " << s.models->loaded_bytes() << "\n";
  o << s.jobs->metrics_text();  // Redis: one line per worker and gauge
  return o.str();
}
}  // namespace

void add_misc_routes(Server::State& s) {
  auto& http = s.http;
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    if (const std::string why = s.jobs->unavailable_reason(); !why.empty())
      return send_json(res, 503, {{"status", "unavailable"}, {"reason", why}, {"version", DIFFQ_VERSION},
                                  {"error", {{"message", why}, {"field", "queue"}, {"type", "unavailable"}}}});
    const auto c = s.jobs->counts();
    send_json(res, s.jobs->accepting() ? 200 : 503,
              {{"status", s.jobs->accepting() ? "ok" : "shutting_down"}, {"queue_length", c.queued},
               {"running", c.running}, {"version", DIFFQ_VERSION}});
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus(s), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", s.models->list()}});
  });
}

}  // namespace diffq::serve
