// diffq_serve_load: a load test of a running `diffq serve` on loopback. C concurrent clients send R requests
// in all, a mix of valid jobs (POST /v1/jobs, followed to the end), invalid ones (each must get its 4xx) and
// cancelled ones (POST then DELETE). Checks that every valid job completes exactly once (none lost, none
// duplicated in GET /v1/jobs), and reports p50/p99 latency, queue wait, and the server's RSS at request
// 100 and at the end (from /metrics).
//
//   diffq_serve_load --port 7860 [--clients 8] [--requests 500] [--steps 2] [--size 32] [--api-key KEY]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct Args {
  std::string host = "127.0.0.1", api_key;
  int port = 7860, clients = 8, requests = 500, steps = 2, size = 32;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5))];
}

int64_t metric(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::atoll(text.c_str() + at + name.size() + 2);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--host") a.host = v;
    else if (k == "--port") a.port = std::atoi(v.c_str());
    else if (k == "--clients") a.clients = std::atoi(v.c_str());
    else if (k == "--requests") a.requests = std::atoi(v.c_str());
    else if (k == "--steps") a.steps = std::atoi(v.c_str());
    else if (k == "--size") a.size = std::atoi(v.c_str());
    else if (k == "--api-key") a.api_key = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  httplib::Headers auth;
  if (!a.api_key.empty()) auth.emplace("Authorization", "Bearer " + a.api_key);
  auto client = [&] {
    auto c = std::make_unique<httplib::Client>(a.host, a.port);
    c->set_read_timeout(600, 0);
    c->set_default_headers(auth);
    return c;
  };
  auto rss_now = [&] {
    auto c = client();
    auto r = c->Get("/metrics");
    return r ? metric("\n" + r->body, "diffq_memory_bytes{kind=\"process_rss\"}") : -1;
  };

  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<double> latency, queue_wait;
  std::set<std::string> valid_ids, cancelled_ids;
  int64_t completed = 0, invalid_ok = 0, invalid_wrong = 0, cancel_ok = 0, errors = 0, rejected_429 = 0;
  std::vector<std::string> problems;
  int64_t rss_100 = -1;
  const auto t0 = clock_type::now();

  auto worker = [&](int cid) {
    auto c = client();
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= a.requests) return;
      if (i == 100) {
        const int64_t r = rss_now();
        std::lock_guard lk(mu);
        rss_100 = r;
      }
      const int kind = i % 20;  // 0..11 valid, 12..16 invalid, 17..19 cancelled
      const json body = {{"prompt", "load " + std::to_string(i)}, {"steps", a.steps}, {"width", a.size},
                         {"height", a.size}, {"seed", i}};
      if (kind >= 12 && kind <= 16) {
        static const std::vector<std::pair<std::string, int>> bad = {
            {"{\"prompt\": ", 400},                          // malformed
            {"{\"prompt\": 5}", 400},                        // wrong type
            {"{\"prompt\": \"x\", \"steps\": 100000}", 422},  // over the step limit
            {"{\"prompt\": \"x\", \"n\": 999}", 422},         // over n
            {"{\"prompt\": \"x\", \"model\": \"nope\"}", 404}};
        const auto& [b, want] = bad[size_t(kind - 12)];
        auto r = c->Post("/v1/jobs", b, "application/json");
        std::lock_guard lk(mu);
        if (r && r->status == want && json::parse(r->body).contains("error")) ++invalid_ok;
        else {
          ++invalid_wrong;
          problems.push_back("invalid request " + b + " got " + (r ? std::to_string(r->status) : "no answer"));
        }
        continue;
      }
      const auto ts = clock_type::now();
      auto r = c->Post("/v1/jobs", body.dump(), "application/json");
      if (r && r->status == 429) {
        std::lock_guard lk(mu);
        ++rejected_429;
        continue;
      }
      if (!r || r->status != 202) {
        std::lock_guard lk(mu);
        ++errors;
        problems.push_back("submit got " + (r ? std::to_string(r->status) + " " + r->body : "no answer"));
        continue;
      }
      const std::string id = json::parse(r->body)["id"];
      if (kind >= 17) {
        auto d = c->Delete(("/v1/jobs/" + id).c_str());
        std::lock_guard lk(mu);
        cancelled_ids.insert(id);
        if (d && d->status == 200) ++cancel_ok;
        else problems.push_back("cancel of " + id + " got " + (d ? std::to_string(d->status) : "no answer"));
      } else {
        std::lock_guard lk(mu);
        if (!valid_ids.insert(id).second) problems.push_back("duplicate id " + id);
      }
      // Follow to the end.
      for (;;) {
        auto g = c->Get(("/v1/jobs/" + id).c_str());
        if (!g || g->status != 200) {
          std::lock_guard lk(mu);
          problems.push_back("GET " + id + " failed");
          break;
        }
        const json j = json::parse(g->body);
        const std::string st = j["status"];
        if (st == "queued" || st == "running") {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        std::lock_guard lk(mu);
        if (kind < 12) {
          if (st == "completed") {
            ++completed;
            latency.push_back(std::chrono::duration<double>(clock_type::now() - ts).count());
            queue_wait.push_back(j["timings"].value("queued_s", 0.0));
          } else {
            problems.push_back("valid job " + id + " ended " + st + " " + j.value("error", ""));
          }
        } else if (st != "cancelled" && st != "completed") {
          problems.push_back("cancelled job " + id + " ended " + st);
        }
        break;
      }
      (void)cid;
    }
  };
  std::vector<std::thread> ts;
  for (int c = 0; c < a.clients; ++c) ts.emplace_back(worker, c);
  for (auto& t : ts) t.join();
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  const int64_t rss_end = rss_now();

  // Exactly once: each valid id is in the server's list once, completed.
  auto c = client();
  auto l = c->Get("/v1/jobs");
  std::map<std::string, int> seen;
  if (l && l->status == 200)
    for (const auto& j : json::parse(l->body)["data"]) ++seen[j["id"].get<std::string>()];
  int64_t listed_dupes = 0;
  for (const auto& [id, n] : seen)
    if (n != 1) ++listed_dupes;

  const double rss_ratio = rss_100 > 0 ? double(rss_end) / double(rss_100) : 0;
  const json report = {{"requests", a.requests}, {"clients", a.clients}, {"wall_s", wall},
                       {"valid_submitted", valid_ids.size()}, {"valid_completed", completed},
                       {"invalid_ok", invalid_ok}, {"invalid_wrong", invalid_wrong},
                       {"cancelled", cancelled_ids.size()}, {"cancel_ok", cancel_ok},
                       {"rejected_429", rejected_429}, {"errors", errors}, {"listed_duplicates", listed_dupes},
                       {"latency_p50_s", pct(latency, 50)}, {"latency_p99_s", pct(latency, 99)},
                       {"queue_wait_p50_s", pct(queue_wait, 50)}, {"queue_wait_p99_s", pct(queue_wait, 99)},
                       {"rss_at_100_bytes", rss_100}, {"rss_at_end_bytes", rss_end}, {"rss_ratio", rss_ratio},
                       {"problems", problems}};
  std::printf("%s\n", report.dump(2).c_str());
  const bool ok = problems.empty() && int64_t(valid_ids.size()) == completed && listed_dupes == 0 &&
                  invalid_wrong == 0 && errors == 0 && rss_ratio > 0 && std::abs(rss_ratio - 1.0) <= 0.05;
  std::fprintf(stderr, "%s\n", ok ? "load test: OK" : "load test: FAILED");
  return ok ? 0 : 1;
}
