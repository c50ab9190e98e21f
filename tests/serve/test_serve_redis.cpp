// `diffq serve --queue redis://...` scaled out as a user runs it: a real redis-server on a loopback port, one
// API process and worker processes of the built binary. Shows: three workers run mixed jobs (jobs API, OpenAI,
// A1111) each exactly once with the pixels `diffq generate` makes; a worker killed (SIGKILL) mid-job leaves its
// job to another, nothing lost or run twice to completion; Redis down -> 503 naming Redis, and the queue
// resumes once it is back (persistence on); a cancel reaches the worker that runs the job. Skips, saying
// why, where redis-server is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/png.h"
#include "redis_test_util.h"
#include "serve_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::RedisProcess;
using diffq::testing::ServeProcess;
using nlohmann::json;

// `diffq generate` with `args` in `dir` -> the pixels of its output `read`.
std::vector<uint8_t> generate_pixels(const std::string& args, const fs::path& dir, const std::string& read = "ref.png") {
  return diffq::testing::generate_reference(args, dir, read).rgb;
}

std::vector<uint8_t> pixels_of(const std::string& png) {
  return diffq::io::decode_png(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "result").rgb;
}

class ServeRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = RedisProcess::missing(); !why.empty()) GTEST_SKIP() << why;
    dir_ = fs::temp_directory_path() / ("diffq-serve-redis-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(results());
    ASSERT_TRUE(redis_.start(dir_ / "redis")) << redis_.log();
  }
  void TearDown() override {
    procs_.clear();  // SIGTERM each, then SIGKILL
    redis_.stop();
    if (!HasFailure()) fs::remove_all(dir_);
    else std::fprintf(stderr, "logs kept in %s\n", dir_.c_str());
  }
  fs::path results() const { return dir_ / "results"; }

  // `diffq serve -m <each of models> --queue <redis> --results <dir> <args>`, ready.
  ServeProcess& serve(const std::string& name, std::vector<std::string> args,
                      const std::vector<std::string>& models = {"tests/fixtures/tiny-flux"}) {
    std::vector<std::string> all = {"--queue", redis_.url(), "--results", results().string()};
    for (const std::string& m : models) all.insert(all.end(), {"-m", m});
    all.insert(all.end(), args.begin(), args.end());
    procs_.push_back(std::make_unique<ServeProcess>(all, dir_ / (name + ".log")));
    return *procs_.back();
  }
  ServeProcess& api() { return serve("api", {"--role", "api", "--port", "0"}); }
  ServeProcess& worker(const std::string& name, const std::string& claim_after = "60") {
    return serve(name, {"--role", "worker", "--worker-name", name, "--claim-after", claim_after});
  }

  static json get(ServeProcess& p, const std::string& path) {
    auto r = p.client()->Get(path.c_str());
    return r && !r->body.empty() ? json::parse(r->body, nullptr, false) : json();
  }
  static std::string post_job(ServeProcess& p, const json& body) {
    auto r = p.client()->Post("/v1/jobs", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 202) << r->body;
    return json::parse(r->body, nullptr, false).value("id", "");
  }
  // The job once it is final (or after `timeout`).
  static json wait_final(ServeProcess& p, const std::string& id, std::chrono::seconds timeout = std::chrono::seconds(90)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    json j;
    while (std::chrono::steady_clock::now() < until) {
      j = get(p, "/v1/jobs/" + id);
      const std::string st = j.is_object() ? j.value("status", "") : "";
      if (st == "completed" || st == "failed" || st == "cancelled") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not end: " << j.dump();
    return j;
  }
  static json wait_step(ServeProcess& p, const std::string& id, int64_t step) {
    json j;
    for (int i = 0; i < 3000; ++i) {
      j = get(p, "/v1/jobs/" + id);
      if (j.is_object() && j.value("status", "") == "running" && j.value("step", int64_t(0)) >= step) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "job " << id << " did not reach step " << step << ": " << j.dump();
    return j;
  }
  // The names of the job's events, in order (the SSE stream replayed to its end).
  static std::vector<std::string> event_names(ServeProcess& p, const std::string& id) {
    auto r = p.client()->Get(("/v1/jobs/" + id + "/events").c_str());
    std::vector<std::string> names;
    if (!r) return names;
    size_t at = 0;
    while ((at = r->body.find("event: ", at)) != std::string::npos) {
      const size_t end = r->body.find('\n', at);
      names.push_back(r->body.substr(at + 7, end - at - 7));
      at = end;
    }
    return names;
  }
  static std::string metric(ServeProcess& p, const std::string& name) {
    auto r = p.client()->Get("/metrics");
    if (!r) return "";
    const auto at = r->body.find("\n" + name + " ");
    if (at == std::string::npos) return "";
    return r->body.substr(at + name.size() + 2, r->body.find('\n', at + 1) - at - name.size() - 2);
  }
  // /metrics' samples: "name{labels}" -> value.
  using Samples = std::map<std::string, std::string>;
  static Samples samples(ServeProcess& p) {
    Samples out;
    auto r = p.client()->Get("/metrics");
    if (!r || r->status != 200) return out;
    size_t at = 0;
    while (at < r->body.size()) {
      size_t end = r->body.find('\n', at);
      if (end == std::string::npos) end = r->body.size();
      const std::string line = r->body.substr(at, end - at);
      at = end + 1;
      const size_t sp = line.rfind(' ');
      if (line.empty() || line[0] == '#' || sp == std::string::npos) continue;
      out[line.substr(0, sp)] = line.substr(sp + 1);
    }
    return out;
  }
  // Polls /metrics until `ok` holds (true) or `timeout` passes (false); `last`: the samples last read.
  static bool wait_metrics(ServeProcess& p, const std::function<bool(const Samples&)>& ok, Samples& last,
                           std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      last = samples(p);
      if (ok(last)) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // A predicate: every sample of `want` has its value.
  static std::function<bool(const Samples&)> has(Samples want) {
    return [want](const Samples& s) {
      for (const auto& [k, v] : want)
        if (auto it = s.find(k); it == s.end() || it->second != v) return false;
      return true;
    };
  }
  static std::string dump(const Samples& s) {
    std::string out;
    for (const auto& [k, v] : s)
      if (k.rfind("diffq_worker", 0) == 0 || k.rfind("diffq_model_queue", 0) == 0) out += k + " " + v + "\n";
    return out;
  }
  static std::string running(const std::string& w) { return "diffq_worker_running{worker=\"" + w + "\"}"; }
  static std::string loaded(const std::string& w, const std::string& m) {
    return "diffq_worker_model_loaded{worker=\"" + w + "\",model=\"" + m + "\"}";
  }
  // The bytes --max-memory counts for a model folder (its .safetensors, .gguf and .bin files).
  static int64_t weight_bytes(const fs::path& folder) {
    int64_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(folder)) {
      const auto ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".safetensors" || ext == ".gguf" || ext == ".bin")) n += int64_t(e.file_size());
    }
    return n;
  }
  // A worker serving `models`, with --max-memory `budget` (0: none) and `args`.
  ServeProcess& routed_worker(const std::string& name, const std::vector<std::string>& models, int64_t budget,
                              std::vector<std::string> args = {}) {
    args.insert(args.end(), {"--role", "worker", "--worker-name", name});
    if (budget > 0) args.insert(args.end(), {"--max-memory", std::to_string(budget)});
    return serve(name, args, models);
  }

  // The files in the results folder (temporaries included: none may be left).
  std::set<std::string> result_files() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(results())) out.insert(e.path().filename().string());
    return out;
  }

  fs::path dir_;
  RedisProcess redis_;
  std::vector<std::unique_ptr<ServeProcess>> procs_;
};

TEST_F(ServeRedis, ThreeWorkersRunEachJobOnceWithGeneratesPixels) {
  ServeProcess& a = serve("api", {"--role", "api", "--port", "0", "--max-queue", "400"});  // all 200 at once
  std::vector<ServeProcess*> ws = {&worker("w1"), &worker("w2"), &worker("w3")};
  ASSERT_TRUE(a.ready()) << a.log();
  for (auto* w : ws) ASSERT_TRUE(w->ready()) << w->log();

  struct Spec {
    std::string api;  // jobs | openai | a1111
    int64_t w, h, steps, seed, n;
  };
  // 200 jobs: 12 distinct requests (so 12 `diffq generate` references), each sent about 17 times.
  constexpr int kJobs = 200, kDistinct = 12;
  std::vector<Spec> specs;
  for (int j = 0; j < kJobs; ++j) {
    const int i = j % kDistinct;
    specs.push_back({i % 6 == 4 ? "openai" : i % 6 == 5 ? "a1111" : "jobs", i % 3 == 0 ? 48 : 64, i % 2 ? 32 : 64,
                     2 + i % 2, 100 + i, i == 2 ? 2 : 1});
  }
  std::vector<std::string> ids(specs.size());
  std::vector<std::thread> sync_calls;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    const std::string prompt = "shape " + std::to_string(i % kDistinct);
    if (s.api == "jobs") {
      ids[i] = post_job(a, {{"prompt", prompt}, {"width", s.w}, {"height", s.h}, {"steps", s.steps},
                            {"seed", s.seed}, {"n", s.n}});
      continue;
    }
    sync_calls.emplace_back([&, i, s, prompt] {  // OpenAI and A1111 answer when the image is done
      const bool openai = s.api == "openai";
      const json body = openai ? json{{"prompt", prompt}, {"size", std::to_string(s.w) + "x" + std::to_string(s.h)},
                                      {"steps", s.steps}, {"seed", s.seed}}
                               : json{{"prompt", prompt}, {"width", s.w}, {"height", s.h}, {"steps", s.steps},
                                      {"seed", s.seed}};
      auto r = a.client()->Post(openai ? "/v1/images/generations" : "/sdapi/v1/txt2img", body.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const json j = json::parse(r->body);
      ids[i] = openai ? j["job_id"].get<std::string>() : json::parse(j["info"].get<std::string>())["job_id"].get<std::string>();
      EXPECT_EQ((openai ? j["data"] : j["images"]).size(), 1u);
    });
  }
  for (auto& t : sync_calls) t.join();

  std::set<std::string> expected_files, workers;
  std::map<std::string, std::vector<uint8_t>> refs;  // `diffq generate` pixels by arguments and output
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_FALSE(ids[i].empty()) << "job " << i;
    const json j = wait_final(a, ids[i]);
    EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
    EXPECT_EQ(j.value("attempts", 0), 1) << j.dump();  // nobody ran it twice
    workers.insert(j.value("worker", ""));
    const auto names = event_names(a, ids[i]);
    EXPECT_EQ(std::count(names.begin(), names.end(), "done"), 1) << ids[i];
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names.back(), "done");
    EXPECT_EQ(std::count(names.begin(), names.end(), "step"), specs[i].steps) << ids[i];
    // The same pixels as `diffq generate` with the same parameters and seed.
    const Spec& s = specs[i];
    const std::string args = "-p 'shape " + std::to_string(i % kDistinct) + "' --steps " + std::to_string(s.steps) + " --width " +
                             std::to_string(s.w) + " --height " + std::to_string(s.h) + " --seed " +
                             std::to_string(s.seed) + (s.n > 1 ? " --num-images " + std::to_string(s.n) : "");
    for (int64_t k = 0; k < s.n; ++k) {
      expected_files.insert(ids[i] + "-" + std::to_string(k) + ".png");
      auto r = a.client()->Get(("/v1/jobs/" + ids[i] + "/result?index=" + std::to_string(k)).c_str());
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const std::string key = args + " #" + std::to_string(k);
      if (!refs.count(key))
        refs[key] = generate_pixels(args, dir_ / ("ref-" + std::to_string(i % kDistinct)),
                                    s.n > 1 ? "ref-" + std::to_string(k) + ".png" : "ref.png");
      EXPECT_EQ(pixels_of(r->body), refs[key]) << "job " << i << " output " << k;
    }
  }
  EXPECT_EQ(result_files(), expected_files);  // one file per output, no duplicates, no temporaries
  EXPECT_EQ(metric(a, "diffq_jobs{state=\"completed\"}"), std::to_string(kJobs));
  EXPECT_EQ(metric(a, "diffq_jobs_submitted_total"), std::to_string(kJobs));
  EXPECT_EQ(refs.size(), size_t(kDistinct + 1));  // one request asks for 2 images
  EXPECT_GE(workers.size(), 2u) << "the jobs were shared among the workers";
  auto m = a.client()->Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* w : {"w1", "w2", "w3"})
    EXPECT_NE(m->body.find(std::string("diffq_worker_models_loaded{worker=\"") + w + "\"} 1"), std::string::npos) << m->body;
}

TEST_F(ServeRedis, AKilledWorkersJobCompletesOnAnother) {
  ServeProcess& a = api();
  std::map<std::string, ServeProcess*> ws = {{"w1", &worker("w1", "2")}, {"w2", &worker("w2", "2")}};
  ASSERT_TRUE(a.ready()) << a.log();
  for (auto& [n, w] : ws) ASSERT_TRUE(w->ready()) << w->log();
  const std::string id = post_job(a, {{"prompt", "long"}, {"width", 256}, {"height", 256}, {"steps", 20}, {"seed", 9}});
  const std::string victim = wait_step(a, id, 1).value("worker", "");
  ASSERT_TRUE(ws.count(victim)) << victim;
  const std::string other = victim == "w1" ? "w2" : "w1";
  const std::string short1 = post_job(a, {{"prompt", "a"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 1}});
  ws[victim]->process().signal(SIGKILL);  // mid-job: no chance to say anything to Redis
  ASSERT_TRUE(ws[victim]->process().wait_exit(std::chrono::seconds(10)));
  const std::string short2 = post_job(a, {{"prompt", "b"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 2}});

  const json j = wait_final(a, id, std::chrono::seconds(120));
  EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
  EXPECT_EQ(j.value("worker", ""), other) << j.dump();
  EXPECT_EQ(j.value("attempts", 0), 2) << j.dump();
  const auto names = event_names(a, id);
  EXPECT_EQ(std::count(names.begin(), names.end(), "done"), 1);
  for (const auto& s : {short1, short2}) EXPECT_EQ(wait_final(a, s).value("status", ""), "completed") << s;
  EXPECT_EQ(result_files(), (std::set<std::string>{id + "-0.png", short1 + "-0.png", short2 + "-0.png"}));
  EXPECT_EQ(metric(a, "diffq_jobs{state=\"completed\"}"), "3");
  auto r = a.client()->Get(("/v1/jobs/" + id + "/result").c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(pixels_of(r->body), generate_pixels("-p long --width 256 --height 256 --steps 20 --seed 9", dir_ / "ref"));
  EXPECT_NE(ws[other]->log().find("claimed job " + id), std::string::npos) << ws[other]->log();
}

TEST_F(ServeRedis, AJobPastMaxAttemptsFailsWithTheReason) {
  ServeProcess& a = api();
  ServeProcess& w1 = serve("w1", {"--role", "worker", "--worker-name", "w1", "--claim-after", "1", "--max-attempts", "1"});
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(w1.ready()) << w1.log();
  const std::string id = post_job(a, {{"prompt", "long"}, {"width", 256}, {"height", 256}, {"steps", 20}, {"seed", 9}});
  wait_step(a, id, 1);
  w1.process().signal(SIGKILL);
  ASSERT_TRUE(w1.process().wait_exit(std::chrono::seconds(10)));
  ServeProcess& w2 = serve("w2", {"--role", "worker", "--worker-name", "w2", "--claim-after", "1", "--max-attempts", "1"});
  ASSERT_TRUE(w2.ready()) << w2.log();
  const json j = wait_final(a, id, std::chrono::seconds(60));
  EXPECT_EQ(j.value("status", ""), "failed") << j.dump();
  EXPECT_NE(j.value("error", "").find("gave up after 1 attempt(s)"), std::string::npos) << j.dump();
  EXPECT_NE(j.value("error", "").find("(last: w1)"), std::string::npos) << j.dump();
  const auto names = event_names(a, id);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "error");
  EXPECT_TRUE(result_files().empty());
}

TEST_F(ServeRedis, RoleAllIsTheApiAndAWorkerInOneProcess) {
  ServeProcess& p = serve("all", {"--role", "all", "--port", "0", "--worker-name", "solo"});
  ASSERT_TRUE(p.ready()) << p.log();
  const std::string id = post_job(p, {{"prompt", "a"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 1}});
  const json j = wait_final(p, id);
  EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
  EXPECT_EQ(j.value("worker", ""), "solo");
  EXPECT_EQ(result_files(), std::set<std::string>{id + "-0.png"});
}

TEST_F(ServeRedis, RedisDownIs503AndTheQueueResumes) {
  ServeProcess& a = api();
  ServeProcess& w = worker("w1");
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(w.ready()) << w.log();
  const std::string before = post_job(a, {{"prompt", "a"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 1}});
  EXPECT_EQ(wait_final(a, before).value("status", ""), "completed");

  redis_.stop();
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/jobs"}, {"GET", "/v1/jobs/" + before}, {"GET", "/v1/jobs"}, {"GET", "/health"},
           {"GET", "/metrics"}, {"POST", "/v1/images/generations"}}) {
    auto c = a.client();
    const std::string body = R"({"prompt": "b", "width": 32, "height": 32, "steps": 2})";
    auto r = method == "POST" ? c->Post(path.c_str(), body, "application/json") : c->Get(path.c_str());
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 503) << path << ": " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << path << ": " << r->body;
    EXPECT_EQ(e["error"]["field"], "queue") << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find("Redis at 127.0.0.1:"), std::string::npos) << r->body;
  }

  ASSERT_TRUE(redis_.start(dir_ / "redis")) << redis_.log();  // the same port and append-only file
  EXPECT_EQ(get(a, "/v1/jobs/" + before).value("status", ""), "completed");  // kept across the restart
  const std::string after = post_job(a, {{"prompt", "c"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 3}});
  EXPECT_EQ(wait_final(a, after).value("status", ""), "completed");  // the worker reconnected by itself
  EXPECT_NE(w.log().find("retrying every second"), std::string::npos) << w.log();
}

// Redis restarted while a worker runs a job: the worker loses Redis at its next step, the job stays pending
// (persisted in the append-only file), and once Redis is back the worker reconnects, claims it after
// --claim-after and runs it again to completion, recorded once.
TEST_F(ServeRedis, RedisRestartedDuringAJobTheJobStillCompletesOnce) {
  ServeProcess& a = api();
  ServeProcess& w = worker("w1", "1");
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(w.ready()) << w.log();
  const std::string id =
      post_job(a, {{"prompt", "a long one"}, {"width", 64}, {"height", 64}, {"steps", 40}, {"seed", 5}});
  wait_step(a, id, 2);
  redis_.stop();
  auto r = a.client()->Get(("/v1/jobs/" + id).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the worker meets the outage mid-job
  ASSERT_TRUE(redis_.start(dir_ / "redis")) << redis_.log();
  const json j = wait_final(a, id, std::chrono::seconds(120));
  EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
  EXPECT_GE(j.value("attempts", int64_t(0)), 2) << j.dump();  // the run Redis cut short, then the one that ended
  const auto names = event_names(a, id);
  EXPECT_EQ(std::count(names.begin(), names.end(), "done"), 1) << id;
  EXPECT_EQ(result_files(), (std::set<std::string>{id + "-0.png"}));
  EXPECT_NE(w.log().find("retrying every second"), std::string::npos) << w.log();
}

TEST_F(ServeRedis, CancelReachesTheWorkerRunningTheJob) {
  ServeProcess& a = api();
  ServeProcess& w = worker("w1");
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(w.ready()) << w.log();
  const std::string id = post_job(a, {{"prompt", "long"}, {"width", 256}, {"height", 256}, {"steps", 150}, {"seed", 4}});
  wait_step(a, id, 2);
  auto r = a.client()->Delete(("/v1/jobs/" + id).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const int64_t at_cancel = get(a, "/v1/jobs/" + id).value("step", int64_t(0));
  const json j = wait_final(a, id, std::chrono::seconds(30));
  EXPECT_EQ(j.value("status", ""), "cancelled") << j.dump();
  EXPECT_LE(j.value("step", int64_t(0)), at_cancel + 1) << "it stopped within a step of the cancel";
  const auto names = event_names(a, id);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "cancelled");
  EXPECT_TRUE(result_files().empty());
  // A cancelled queued job never runs: the worker skips it.
  const std::string next = post_job(a, {{"prompt", "n"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 5}});
  EXPECT_EQ(wait_final(a, next).value("status", ""), "completed");
}

// Routing by model: each worker serves one model (-m); every job runs, once, on the worker that has its model.
TEST_F(ServeRedis, JobsGoToAWorkerThatServesTheirModel) {
  const std::vector<std::string> both = {"tests/fixtures/tiny-flux", "tests/fixtures/tiny-flux-schnell"};
  ServeProcess& a = serve("api", {"--role", "api", "--port", "0"}, both);
  ServeProcess& dev = serve("dev", {"--role", "worker", "--worker-name", "dev"}, {"tests/fixtures/tiny-flux"});
  ServeProcess& schnell =
      serve("schnell", {"--role", "worker", "--worker-name", "schnell"}, {"tests/fixtures/tiny-flux-schnell"});
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(dev.ready()) << dev.log();
  ASSERT_TRUE(schnell.ready()) << schnell.log();
  std::vector<std::pair<std::string, std::string>> jobs;  // id, the worker that must run it
  for (int i = 0; i < 3; ++i) {
    jobs.emplace_back(post_job(a, {{"prompt", "a fox"}, {"model", "tiny-flux"}, {"steps", 2}, {"width", 32},
                                   {"height", 32}, {"seed", i}}), "dev");
    jobs.emplace_back(post_job(a, {{"prompt", "a fox"}, {"model", "tiny-flux-schnell"}, {"steps", 2}, {"width", 32},
                                   {"height", 32}, {"seed", i}}), "schnell");
  }
  for (const auto& [id, who] : jobs) {
    const json j = wait_final(a, id);
    EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
    EXPECT_EQ(j.value("worker", ""), who) << j.dump();
    EXPECT_EQ(j.value("attempts", int64_t(0)), 1) << j.dump();
  }
}

// Routing by loaded model: two workers that both serve tiny-flux (A) and tiny-flux-schnell (B), a memory budget
// that holds one of them, each started with the other one loaded (the first -m that fits). Every job of A runs
// on A's worker and every job of B on B's (neither loads the other's model), and /metrics shows both workers,
// idle, with their loaded models, and the jobs each ended.
TEST_F(ServeRedis, JobsGoToTheWorkerThatHasTheirModelLoaded) {
  const std::string A = "tests/fixtures/tiny-flux", B = "tests/fixtures/tiny-flux-schnell";
  const int64_t budget = std::max(weight_bytes(A), weight_bytes(B));
  ASSERT_LT(budget, weight_bytes(A) + weight_bytes(B)) << "the budget must hold one model, not both";
  ServeProcess& a = serve("api", {"--role", "api", "--port", "0"}, {A, B});
  ServeProcess& wa = routed_worker("wa", {A, B}, budget);  // loads tiny-flux at start
  ServeProcess& wb = routed_worker("wb", {B, A}, budget);  // loads tiny-flux-schnell at start
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(wa.ready()) << wa.log();
  ASSERT_TRUE(wb.ready()) << wb.log();
  const Samples start = {{"diffq_workers", "2"},
                         {running("wa"), "0"},
                         {running("wb"), "0"},
                         {loaded("wa", "tiny-flux"), "1"},
                         {loaded("wa", "tiny-flux-schnell"), "0"},
                         {loaded("wb", "tiny-flux"), "0"},
                         {loaded("wb", "tiny-flux-schnell"), "1"},
                         {"diffq_worker_models_loaded{worker=\"wa\"}", "1"},
                         {"diffq_worker_models_loaded{worker=\"wb\"}", "1"}};
  Samples m;
  ASSERT_TRUE(wait_metrics(a, has(start), m)) << dump(m);
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    auto job = [&](const std::string& model) {
      return post_job(a, {{"prompt", "a fox"}, {"model", model}, {"steps", 2}, {"width", 32}, {"height", 32},
                          {"seed", round}});
    };
    // Both at once, in either order: each goes to the worker that has its model loaded.
    const std::string first = round % 2 ? "tiny-flux-schnell" : "tiny-flux";
    const std::string second = round % 2 ? "tiny-flux" : "tiny-flux-schnell";
    const std::map<std::string, std::string> ids = {{first, job(first)}, {second, job(second)}};
    for (const auto& [model, id] : ids) {
      const json j = wait_final(a, id);
      EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
      EXPECT_EQ(j.value("worker", ""), model == "tiny-flux" ? "wa" : "wb") << model << ": " << j.dump();
      EXPECT_EQ(j.value("attempts", int64_t(0)), 1) << j.dump();
    }
    // The next round starts with both idle again (each reports it once its job has ended).
    ASSERT_TRUE(wait_metrics(a, has({{running("wa"), "0"}, {running("wb"), "0"}}), m)) << dump(m);
  }
  Samples end = start;
  end["diffq_worker_jobs_total{worker=\"wa\"}"] = std::to_string(kRounds);
  end["diffq_worker_jobs_total{worker=\"wb\"}"] = std::to_string(kRounds);
  end["diffq_model_queue_length{model=\"tiny-flux\"}"] = "0";
  end["diffq_model_queue_length{model=\"tiny-flux-schnell\"}"] = "0";
  EXPECT_TRUE(wait_metrics(a, has(end), m)) << dump(m);  // nobody loaded the other's model
  for (ServeProcess* w : {&wa, &wb}) EXPECT_EQ(w->log().find("not loaded here"), std::string::npos) << w->log();
}

// The worker that has the model loaded is busy (a long job): the idle worker that serves the model too loads it
// (evicting its own, --max-memory) rather than let the job wait. /metrics shows who runs and what each has
// loaded; a worker killed without a word drops out of /metrics once its heartbeat expires.
TEST_F(ServeRedis, ABusyWorkersModelIsLoadedByAnIdleWorker) {
  const std::string A = "tests/fixtures/tiny-flux", B = "tests/fixtures/tiny-flux-schnell";
  const int64_t budget = std::max(weight_bytes(A), weight_bytes(B));
  ServeProcess& a = serve("api", {"--role", "api", "--port", "0", "--max-steps", "1000"}, {A, B});
  ServeProcess& wa = routed_worker("wa", {A}, 0, {"--max-steps", "1000"});
  ServeProcess& wb = routed_worker("wb", {B, A}, budget, {"--max-steps", "1000"});  // tiny-flux-schnell loaded
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(wa.ready()) << wa.log();
  ASSERT_TRUE(wb.ready()) << wb.log();
  Samples m;
  ASSERT_TRUE(wait_metrics(a, has({{"diffq_workers", "2"}, {running("wa"), "0"}, {running("wb"), "0"},
                                   {loaded("wa", "tiny-flux"), "1"}, {loaded("wb", "tiny-flux"), "0"},
                                   {loaded("wb", "tiny-flux-schnell"), "1"}}), m)) << dump(m);
  // A long job of tiny-flux: the idle worker that has it loaded takes it.
  const std::string long_id = post_job(a, {{"prompt", "long"}, {"model", "tiny-flux"}, {"width", 256}, {"height", 256},
                                           {"steps", 1000}, {"seed", 4}});
  EXPECT_EQ(wait_step(a, long_id, 1).value("worker", ""), "wa");
  ASSERT_TRUE(wait_metrics(a, has({{running("wa"), "1"}, {running("wb"), "0"}}), m)) << dump(m);
  // Another: wa is busy, so wb loads tiny-flux (evicting tiny-flux-schnell) and runs it meanwhile.
  const std::string short_id =
      post_job(a, {{"prompt", "short"}, {"model", "tiny-flux"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 1}});
  const json s = wait_final(a, short_id, std::chrono::seconds(120));
  EXPECT_EQ(s.value("status", ""), "completed") << s.dump();
  EXPECT_EQ(s.value("worker", ""), "wb") << s.dump();
  EXPECT_EQ(get(a, "/v1/jobs/" + long_id).value("status", ""), "running") << "the long job must outlast the short one";
  EXPECT_TRUE(wait_metrics(a, has({{running("wa"), "1"}, {running("wb"), "0"}, {loaded("wb", "tiny-flux"), "1"},
                                   {loaded("wb", "tiny-flux-schnell"), "0"}, {"diffq_worker_jobs_total{worker=\"wb\"}", "1"}}),
                           m)) << dump(m);
  EXPECT_NE(wb.log().find("taking a job of tiny-flux, not loaded here (the workers that have it loaded are busy)"),
            std::string::npos) << wb.log();
  auto r = a.client()->Delete(("/v1/jobs/" + long_id).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(wait_final(a, long_id).value("status", ""), "cancelled");

  wb.process().signal(SIGKILL);  // no chance to remove its record: it expires
  ASSERT_TRUE(wb.process().wait_exit(std::chrono::seconds(10)));
  EXPECT_TRUE(wait_metrics(a, [](const Samples& s) {
    return s.count("diffq_workers") && s.at("diffq_workers") == "1" && !s.count(running("wb")) && s.count(running("wa"));
  }, m)) << dump(m);
}

// A job of a model that only an idle worker without it loaded serves: that worker loads it (evicting the model it
// had, --max-memory) and runs it; the next job of the evicted model goes to the worker that still has it.
TEST_F(ServeRedis, AJobOfAModelNoWorkerHasLoadedIsLoadedAndRun) {
  const std::string A = "tests/fixtures/tiny-flux", B = "tests/fixtures/tiny-flux-schnell";
  const int64_t budget = std::max(weight_bytes(A), weight_bytes(B));
  ServeProcess& a = serve("api", {"--role", "api", "--port", "0"}, {A, B});
  ServeProcess& wa = routed_worker("wa", {A}, 0);
  ServeProcess& wb = routed_worker("wb", {A, B}, budget);  // tiny-flux loaded, tiny-flux-schnell not
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(wa.ready()) << wa.log();
  ASSERT_TRUE(wb.ready()) << wb.log();
  Samples m;
  ASSERT_TRUE(wait_metrics(a, has({{"diffq_workers", "2"}, {running("wa"), "0"}, {running("wb"), "0"},
                                   {loaded("wb", "tiny-flux"), "1"}, {loaded("wb", "tiny-flux-schnell"), "0"}}), m))
      << dump(m);
  const std::string id = post_job(
      a, {{"prompt", "a fox"}, {"model", "tiny-flux-schnell"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 3}});
  const json j = wait_final(a, id);
  EXPECT_EQ(j.value("status", ""), "completed") << j.dump();
  EXPECT_EQ(j.value("worker", ""), "wb") << j.dump();
  EXPECT_EQ(j.value("attempts", int64_t(0)), 1) << j.dump();
  EXPECT_EQ(result_files(), std::set<std::string>{id + "-0.png"});
  EXPECT_NE(wb.log().find("taking a job of tiny-flux-schnell, not loaded here (no worker has it loaded)"),
            std::string::npos) << wb.log();
  EXPECT_TRUE(wait_metrics(a, has({{running("wb"), "0"}, {loaded("wb", "tiny-flux-schnell"), "1"},
                                   {loaded("wb", "tiny-flux"), "0"}}), m)) << dump(m);
  const std::string next = post_job(
      a, {{"prompt", "a fox"}, {"model", "tiny-flux"}, {"width", 32}, {"height", 32}, {"steps", 2}, {"seed", 3}});
  const json n = wait_final(a, next);
  EXPECT_EQ(n.value("status", ""), "completed") << n.dump();
  EXPECT_EQ(n.value("worker", ""), "wa") << n.dump();
}

TEST_F(ServeRedis, BadQueueOptionsAreClearErrors) {
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--role", "worker"}, "--role worker needs --queue redis://"},
           {{"--queue", "http://127.0.0.1:1", "--role", "api"}, "must be redis://HOST[:PORT][/DB]"},
           {{"--queue", "redis://127.0.0.1:99999", "--role", "api"}, "the port '99999' must be 1..65535"},
           {{"--queue", "redis://127.0.0.1:6379/x", "--role", "api"}, "the database 'x' must be a number"}}) {
    std::vector<std::string> all = {"-m", "tests/fixtures/tiny-flux", "--port", "0"};
    all.insert(all.end(), args.begin(), args.end());
    ServeProcess p(all, dir_ / "bad.log");
    ASSERT_TRUE(p.process().wait_exit(std::chrono::seconds(30)));
    EXPECT_NE(p.process().exit_status(), 0);
    EXPECT_NE(p.log().find(want), std::string::npos) << p.log();
  }
}

}  // namespace
