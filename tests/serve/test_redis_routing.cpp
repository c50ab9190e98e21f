// The routing policy of the Redis workers (apps/serve/routing.h) and their heartbeat records
// (apps/serve/worker_beat.h), without Redis: which idle worker takes a job of a model it has not loaded, the
// record's codec, and the /metrics lines made from the records. ServeRedis.* run it with real processes.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "routing.h"
#include "worker_beat.h"

namespace {

using diffq::serve::route_cold;
using diffq::serve::WorkerBeat;

WorkerBeat w(const std::string& name, std::vector<std::string> serves, std::vector<std::string> loaded,
             const std::string& job = "") {
  WorkerBeat b;
  b.name = name;
  b.serves = std::move(serves);
  b.loaded = std::move(loaded);
  b.job = job;
  return b;
}

// How many of `workers` (each asking as itself, idle and without `model` loaded) would take the job.
int takers(const std::vector<WorkerBeat>& workers, const std::string& model, const std::map<std::string, int64_t>& waiting) {
  int n = 0;
  for (const auto& me : workers)
    if (me.idle() && me.can_serve(model) && !me.has_loaded(model) && route_cold(me, model, workers, waiting).take) ++n;
  return n;
}

TEST(RedisRouting, AnIdleWorkerWithTheModelLoadedGetsItFirst) {
  const WorkerBeat me = w("b", {"A", "B"}, {"B"});
  const std::vector<WorkerBeat> live = {w("a", {"A", "B"}, {"A"}), me};
  const auto r = route_cold(me, "A", live, {{"A", 1}});
  EXPECT_FALSE(r.take);
  EXPECT_NE(r.why.find("idle worker a has it loaded"), std::string::npos) << r.why;
}

TEST(RedisRouting, WhenEveryWorkerWithTheModelIsBusyAnIdleOneLoadsIt) {
  const WorkerBeat me = w("b", {"A", "B"}, {"B"});
  const std::vector<WorkerBeat> live = {w("a", {"A"}, {"A"}, "job-1"), me};
  const auto r = route_cold(me, "A", live, {{"A", 1}});
  EXPECT_TRUE(r.take);
  EXPECT_NE(r.why.find("loaded are busy"), std::string::npos) << r.why;
  // Nobody has it: the idle worker that serves it loads it.
  EXPECT_TRUE(route_cold(me, "A", {me}, {{"A", 1}}).take);
  EXPECT_NE(route_cold(me, "A", {me}, {{"A", 1}}).why.find("no worker has it loaded"), std::string::npos);
}

TEST(RedisRouting, OnlyTheLeastBusyIdleWorkerLoadsIt) {
  // c has jobs waiting for its loaded model (it takes those first): b loads A.
  const std::vector<WorkerBeat> live = {w("b", {"A", "B"}, {"B"}), w("c", {"A", "C"}, {"C"})};
  const std::map<std::string, int64_t> waiting = {{"A", 1}, {"B", 0}, {"C", 3}};
  EXPECT_TRUE(route_cold(live[0], "A", live, waiting).take);
  const auto r = route_cold(live[1], "A", live, waiting);
  EXPECT_FALSE(r.take);
  EXPECT_NE(r.why.find("idle worker b is less busy"), std::string::npos) << r.why;
  EXPECT_EQ(takers(live, "A", waiting), 1);
  // Equally busy: fewer models loaded (nothing to evict), then the name; always exactly one.
  const std::vector<WorkerBeat> even = {w("x", {"A", "B"}, {"B"}), w("y", {"A"}, {}), w("z", {"A"}, {})};
  EXPECT_EQ(takers(even, "A", {{"A", 1}}), 1);
  EXPECT_TRUE(route_cold(even[1], "A", even, {{"A", 1}}).take);
  EXPECT_FALSE(route_cold(even[2], "A", even, {{"A", 1}}).take);
  EXPECT_FALSE(route_cold(even[0], "A", even, {{"A", 1}}).take);
}

TEST(RedisRouting, BusyWorkersAndWorkersThatDoNotServeTheModelAreNoCandidates) {
  const WorkerBeat me = w("m", {"A", "B"}, {"B"});
  const std::map<std::string, int64_t> waiting = {{"A", 1}, {"B", 5}};
  // Less busy, but busy now or not serving A: `me` still takes it.
  const std::vector<WorkerBeat> live = {me, w("a", {"A"}, {}, "job-2"), w("b", {"C"}, {})};
  EXPECT_TRUE(route_cold(me, "A", live, waiting).take);
}

TEST(RedisRouting, TheWorkersOwnStaleRecordIsReplacedByItsFreshOne) {
  // Redis still says `me` runs a job with A loaded (its record from a second ago): it decides on what it is now.
  const WorkerBeat me = w("m", {"A"}, {});
  const std::vector<WorkerBeat> live = {w("m", {"A"}, {"A"}, "job-3")};
  EXPECT_TRUE(route_cold(me, "A", live, {{"A", 1}}).take);
}

TEST(RedisWorkerBeat, RoundTripsAndRefusesWhatIsNotARecord) {
  WorkerBeat b = w("gpu-0", {"flux", "wan"}, {"flux"}, "job-9");
  b.done = 12;
  b.queue = 3;
  b.seen_ms = 1700000000123;
  const auto back = WorkerBeat::parse(b.to_json().dump());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, "gpu-0");
  EXPECT_EQ(back->serves, b.serves);
  EXPECT_EQ(back->loaded, b.loaded);
  EXPECT_EQ(back->job, "job-9");
  EXPECT_EQ(back->done, 12);
  EXPECT_EQ(back->queue, 3);
  EXPECT_EQ(back->seen_ms, 1700000000123);
  for (const char* bad : {"", "not json", "[1]", "{}", R"({"name": ""})", R"({"name": 3})",
                          R"({"name": "a", "loaded": "flux"})", R"({"name": "a", "serves": [1]})",
                          R"({"name": "a", "done": "many"})", R"({"name": "a", "job": 5})"})
    EXPECT_FALSE(WorkerBeat::parse(bad)) << bad;
}

TEST(RedisWorkerBeat, MetricsHaveALinePerWorkerAndPerWorkerAndModel) {
  WorkerBeat a = w("a", {"flux", "wan"}, {"flux"}, "job-1");
  a.done = 4;
  a.queue = 2;
  a.seen_ms = 10000;
  WorkerBeat q = w("we\"ird\\", {"flux"}, {});
  q.seen_ms = 10500;
  const std::string t = diffq::serve::workers_metrics_text({a, q}, {{"flux", 2}, {"wan", 0}}, 11000);
  for (const char* line :
       {"diffq_workers 2\n", "diffq_worker_running{worker=\"a\"} 1\n", "diffq_worker_jobs_total{worker=\"a\"} 4\n",
        "diffq_worker_models_loaded{worker=\"a\"} 1\n", "diffq_worker_model_loaded{worker=\"a\",model=\"flux\"} 1\n",
        "diffq_worker_model_loaded{worker=\"a\",model=\"wan\"} 0\n", "diffq_worker_queue_length{worker=\"a\"} 2\n",
        "diffq_worker_last_seen_seconds{worker=\"a\"} 1.000\n", "diffq_worker_running{worker=\"we\\\"ird\\\\\"} 0\n",
        "diffq_worker_model_loaded{worker=\"we\\\"ird\\\\\",model=\"flux\"} 0\n", "diffq_model_queue_length{model=\"flux\"} 2\n",
        "diffq_model_queue_length{model=\"wan\"} 0\n"})
    EXPECT_NE(t.find(line), std::string::npos) << line << "\nin:\n" << t;
  const std::string none = diffq::serve::workers_metrics_text({}, {}, 0);
  EXPECT_NE(none.find("diffq_workers 0\n"), std::string::npos) << none;
  EXPECT_EQ(none.find("diffq_worker_running"), std::string::npos) << none;
}

}  // namespace
