// The jobs API on loopback: 202 + id, the server-sent events in order (queued, step 1..N, done) with
// previews, the result, the list; cancel of a queued and of a running job (stops within one step, the
// allocator back to its idle level); 429 when the queue is full; shutdown cancels and leaves no half file;
// a video job on the tiny Wan pipeline returns an mp4.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "diffq/memory.h"
#include "io/png.h"
#include "serve_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::body_json;
using diffq::testing::TestServer;
using nlohmann::json;

struct Sse {
  std::string name;
  json data;
};

// Reads a job's whole event stream (until the server closes it).
std::vector<Sse> read_events(const TestServer& s, const std::string& id) {
  std::string raw;
  auto c = s.client();
  auto r = c->Get(("/v1/jobs/" + id + "/events").c_str(), [&](const char* d, size_t n) {
    raw.append(d, n);
    return true;
  });
  EXPECT_TRUE(r);
  if (r) {
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  }
  std::vector<Sse> out;
  size_t at = 0;
  while ((at = raw.find("event: ", at)) != std::string::npos) {
    const size_t nl = raw.find('\n', at);
    const std::string name = raw.substr(at + 7, nl - at - 7);
    const size_t dl = raw.find("data: ", nl);
    const size_t end = raw.find("\n\n", dl);
    out.push_back({name, json::parse(raw.substr(dl + 6, end - dl - 6))});
    at = end;
  }
  return out;
}

json get_job(const TestServer& s, const std::string& id) { return body_json(s.client()->Get(("/v1/jobs/" + id).c_str())); }

json wait_final(const TestServer& s, const std::string& id) {
  for (int i = 0; i < 6000; ++i) {
    const json j = get_job(s, id);
    const std::string st = j["status"];
    if (st != "queued" && st != "running") return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

std::string submit(const TestServer& s, const json& body) {
  auto r = s.client()->Post("/v1/jobs", body.dump(), "application/json");
  EXPECT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  const json j = body_json(r);
  EXPECT_EQ(j["status"], "queued");
  EXPECT_GE(j["position"].get<int>(), 1);
  return j["id"];
}

TEST(ServeJobs, EventsInOrderAndResult) {
  TestServer s({});
  const std::string id = submit(s, {{"prompt", "a red fox"}, {"steps", 3}, {"width", 64}, {"height", 48}, {"seed", 5}});
  const auto evs = read_events(s, id);
  ASSERT_EQ(evs.size(), 5u);  // queued, step 1, 2, 3, done
  EXPECT_EQ(evs[0].name, "queued");
  EXPECT_EQ(evs[0].data["position"], 1);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(evs[size_t(i)].name, "step");
    EXPECT_EQ(evs[size_t(i)].data["step"], i);
    EXPECT_EQ(evs[size_t(i)].data["steps"], 3);
    EXPECT_GE(evs[size_t(i)].data["elapsed_s"].get<double>(), 0.0);
    EXPECT_GE(evs[size_t(i)].data["eta_s"].get<double>(), 0.0);
    ASSERT_TRUE(evs[size_t(i)].data.contains("preview")) << evs[size_t(i)].data.dump();
    EXPECT_EQ(evs[size_t(i)].data["preview"].get<std::string>().rfind("data:image/png;base64,", 0), 0u);
  }
  EXPECT_EQ(evs[4].name, "done");
  EXPECT_EQ(evs[4].data["result_url"], "/v1/jobs/" + id + "/result");

  const json j = get_job(s, id);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["kind"], "image");
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["steps"], 3);
  EXPECT_EQ(j["params"]["prompt"], "a red fox");
  EXPECT_TRUE(j["timings"].contains("denoise_s"));
  auto r = s.client()->Get(("/v1/jobs/" + id + "/result").c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "image/png");
  const auto png = diffq::io::decode_png(reinterpret_cast<const uint8_t*>(r->body.data()), r->body.size(), "result");
  EXPECT_EQ(png.width, 64);
  EXPECT_EQ(png.height, 48);

  // The list: newest first.
  const std::string id2 = submit(s, {{"prompt", "b"}, {"steps", 1}, {"width", 32}, {"height", 32}});
  wait_final(s, id2);
  const json list = body_json(s.client()->Get("/v1/jobs"))["data"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["id"], id2);
  EXPECT_EQ(list[1]["id"], id);
}

TEST(ServeJobs, CancelRunningStopsWithinOneStepAndFreesMemory) {
  TestServer s({});
  // Warm-up: the first run fills the caches a run keeps (so "idle" is the level between jobs).
  wait_final(s, submit(s, {{"prompt", "warm"}, {"steps", 2}, {"width", 64}, {"height", 64}}));
  const int64_t idle = diffq::memory_stats(diffq::Device::cpu()).current_bytes;

  const std::string id = submit(s, {{"prompt", "long"}, {"steps", 150}, {"width", 128}, {"height", 128}});
  // Wait until it runs a few steps.
  for (int i = 0; i < 6000 && get_job(s, id)["step"].get<int>() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GT(diffq::memory_stats(diffq::Device::cpu()).current_bytes, idle);  // the job's buffers are live
  auto d = s.client()->Delete(("/v1/jobs/" + id).c_str());
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  const json at_cancel = body_json(d);
  EXPECT_TRUE(at_cancel["cancel_requested"].get<bool>());
  const int64_t step_at_cancel = at_cancel["step"];
  const json j = wait_final(s, id);
  EXPECT_EQ(j["status"], "cancelled");
  EXPECT_LE(j["step"].get<int64_t>(), step_at_cancel + 1);  // the step running at the cancel, no more
  EXPECT_LT(j["step"].get<int64_t>(), 150);
  auto r = s.client()->Get(("/v1/jobs/" + id + "/result").c_str());
  EXPECT_EQ(r->status, 409);
  // Memory back to the idle level once the worker let go of the job.
  for (int i = 0; i < 500 && body_json(s.client()->Get("/health"))["running"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(diffq::memory_stats(diffq::Device::cpu()).current_bytes, idle);
  const auto evs = read_events(s, id);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().name, "cancelled");
}

TEST(ServeJobs, CancelQueuedAndQueueFull) {
  diffq::serve::ServeOptions o;
  o.max_queue = 2;
  TestServer s(o);
  const std::string running = submit(s, {{"prompt", "long"}, {"steps", 150}, {"width", 128}, {"height", 128}});
  for (int i = 0; i < 6000 && get_job(s, running)["status"] != "running"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const std::string q1 = submit(s, {{"prompt", "a"}, {"steps", 1}, {"width", 32}, {"height", 32}});
  const std::string q2 = submit(s, {{"prompt", "b"}, {"steps", 1}, {"width", 32}, {"height", 32}});
  EXPECT_EQ(get_job(s, q2)["position"], 2);
  auto full = s.client()->Post("/v1/jobs", json{{"prompt", "c"}}.dump(), "application/json");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 429);
  EXPECT_EQ(body_json(full)["error"]["field"], "queue");
  EXPECT_EQ(body_json(full)["error"]["limit"], 2);
  // A queued job is cancelled at once.
  auto d = s.client()->Delete(("/v1/jobs/" + q1).c_str());
  ASSERT_TRUE(d);
  EXPECT_EQ(get_job(s, q1)["status"], "cancelled");
  EXPECT_EQ(get_job(s, q2)["position"], 1);
  s.client()->Delete(("/v1/jobs/" + running).c_str());
  EXPECT_EQ(wait_final(s, running)["status"], "cancelled");
  EXPECT_EQ(wait_final(s, q2)["status"], "completed");
  auto m = s.client()->Get("/metrics");
  EXPECT_NE(m->body.find("diffq_jobs{state=\"cancelled\"} 2"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("diffq_jobs{state=\"completed\"} 1"), std::string::npos) << m->body;
}

TEST(ServeJobs, ShutdownCancelsAndLeavesNoHalfFile) {
  auto s = std::make_unique<TestServer>(diffq::serve::ServeOptions{});
  const fs::path dir = s->results_dir;
  const std::string done = submit(*s, {{"prompt", "a"}, {"steps", 1}, {"width", 32}, {"height", 32}});
  wait_final(*s, done);
  const std::string id = submit(*s, {{"prompt", "long"}, {"steps", 150}, {"width", 128}, {"height", 128}});
  const std::string queued = submit(*s, {{"prompt", "q"}, {"steps", 1}});
  for (int i = 0; i < 6000 && get_job(*s, id)["step"].get<int>() < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto job = s->server->state().jobs->get(id);
  auto qjob = s->server->state().jobs->get(queued);
  s->server->stop(false);
  EXPECT_EQ(diffq::serve::status_name(job->status), std::string("cancelled"));
  EXPECT_EQ(diffq::serve::status_name(qjob->status), std::string("cancelled"));
  EXPECT_FALSE(s->server->state().jobs->accepting());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  ASSERT_EQ(files.size(), 1u);  // the completed job's PNG only: no temporary, no partial file
  EXPECT_EQ(files[0], done + "-0.png");
  s.reset();
}

TEST(ServeJobs, VideoJobOnWan) {
  diffq::serve::ServeOptions o;
  o.models = {{"tiny-wan", "tests/fixtures/tiny-wan"}, {"tiny-flux", "tests/fixtures/tiny-flux"}};
  TestServer s(o);
  const json models = body_json(s.client()->Get("/v1/models"))["data"];
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0]["kind"], "video");
  EXPECT_TRUE(models[0]["defaults"].contains("frames"));
  EXPECT_EQ(models[1]["kind"], "image");
  const std::string id = submit(s, {{"prompt", "a cat surfing"}, {"steps", 2}, {"width", 32}, {"height", 32},
                                    {"frames", 5}, {"seed", 1}});
  const auto evs = read_events(s, id);
  ASSERT_GE(evs.size(), 4u);
  EXPECT_EQ(evs.front().name, "queued");
  EXPECT_EQ(evs.back().name, "done") << evs.back().data.dump();
  EXPECT_TRUE(evs[1].data.contains("preview"));
  const json j = get_job(s, id);
  EXPECT_EQ(j["kind"], "video");
  auto r = s.client()->Get(("/v1/jobs/" + id + "/result").c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "video/mp4");
  EXPECT_EQ(r->body.substr(4, 4), "ftyp");
  // The image model by name, on the same server; frames on it is refused.
  const std::string img = submit(s, {{"model", "tiny-flux"}, {"prompt", "x"}, {"steps", 1}, {"width", 32}, {"height", 32}});
  EXPECT_EQ(wait_final(s, img)["kind"], "image");
  // OpenAI's images endpoint refuses a video model.
  auto oa = s.client()->Post("/v1/images/generations", json{{"prompt", "x"}, {"model", "tiny-wan"}}.dump(), "application/json");
  EXPECT_EQ(oa->status, 400);
}

TEST(ServeJobs, LruEvictionUnderMemoryBudget) {
  diffq::serve::ServeOptions o;
  o.models = {{"a", "tests/fixtures/tiny-flux"}, {"b", "tests/fixtures/tiny-wan"}};
  o.max_memory_bytes = 1;  // fits nothing: one model at a time, loaded on demand
  TestServer s(o);
  auto loaded = [&] {
    std::vector<bool> v;
    const json models = body_json(s.client()->Get("/v1/models"));
    for (const auto& m : models["data"]) v.push_back(m["loaded"].get<bool>());
    return v;
  };
  EXPECT_EQ(loaded(), (std::vector<bool>{false, false}));
  EXPECT_EQ(wait_final(s, submit(s, {{"model", "a"}, {"prompt", "x"}, {"steps", 1}, {"width", 32}, {"height", 32}}))["status"],
            "completed");
  EXPECT_EQ(loaded(), (std::vector<bool>{true, false}));
  EXPECT_EQ(wait_final(s, submit(s, {{"model", "b"}, {"prompt", "x"}, {"steps", 1}, {"width", 32}, {"height", 32},
                                     {"frames", 1}}))["status"],
            "completed");
  EXPECT_EQ(loaded(), (std::vector<bool>{false, true}));
}

}  // namespace

namespace {

TEST(ServeA1111, ProgressAndInterruptOfTheRunningJob) {
  TestServer s({});
  const std::string id = submit(s, {{"prompt", "long"}, {"steps", 150}, {"width", 128}, {"height", 128}});
  for (int i = 0; i < 6000 && get_job(s, id)["step"].get<int>() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const json p = body_json(s.client()->Get("/sdapi/v1/progress"));
  EXPECT_EQ(p["state"]["job"], id);
  EXPECT_EQ(p["state"]["sampling_steps"], 150);
  EXPECT_GE(p["state"]["sampling_step"].get<int>(), 2);
  EXPECT_GT(p["progress"].get<double>(), 0.0);
  EXPECT_LT(p["progress"].get<double>(), 1.0);
  EXPECT_GT(p["eta_relative"].get<double>(), 0.0);
  ASSERT_TRUE(p["current_image"].is_string()) << p.dump().substr(0, 300);
  EXPECT_EQ(p["current_image"].get<std::string>().rfind("iVBOR", 0), 0u);  // base64 of a PNG signature
  const json skipped = body_json(s.client()->Get("/sdapi/v1/progress?skip_current_image=true"));
  EXPECT_TRUE(skipped["current_image"].is_null());
  auto i = s.client()->Post("/sdapi/v1/interrupt", "", "application/json");
  ASSERT_TRUE(i);
  EXPECT_EQ(i->status, 200);
  EXPECT_EQ(wait_final(s, id)["status"], "cancelled");
  const json idle = body_json(s.client()->Get("/sdapi/v1/progress"));
  EXPECT_EQ(idle["progress"], 0.0);
  EXPECT_EQ(idle["state"]["job_count"], 0);
}

}  // namespace
