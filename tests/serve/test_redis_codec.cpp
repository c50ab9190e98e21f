// The pieces of the Redis queue that need no Redis: the --queue address, and a job's spec as the API
// writes it and a worker reads it back (the worker maps the request with the same to_generate_params, so
// it runs what the API validated; foreign or broken specs are errors naming the field).
#include <gtest/gtest.h>

#include "diffq/error.h"
#include "job_codec.h"
#include "redis_client.h"

namespace {

using diffq::serve::RedisUrl;
using nlohmann::json;

TEST(RedisUrl, ParsesHostPortAndDatabase) {
  const RedisUrl a = RedisUrl::parse("redis://10.0.0.5:6380/2");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.db, 2);
  const RedisUrl b = RedisUrl::parse("redis://queue.local");
  EXPECT_EQ(b.host, "queue.local");
  EXPECT_EQ(b.port, 6379);
  EXPECT_EQ(b.db, 0);
  for (const char* bad : {"http://x:1", "redis://", "redis://:6379", "redis://h:0", "redis://h:70000", "redis://h:1/x",
                          "redis://h:12ab", "redis://h:1/-1"})
    EXPECT_THROW(RedisUrl::parse(bad), diffq::Error) << bad;
}

TEST(RedisJobSpec, RoundTripsTheRequestAndMapsItAgain) {
  diffq::serve::Job job;
  job.id = "job_1";
  job.model = "tiny-flux";
  job.kind = "image";
  job.request.prompt = "a fox";
  job.request.negative_prompt = "blur";
  job.request.width = 64;
  job.request.height = 48;
  job.request.steps = 3;
  job.request.guidance = 2.5;
  job.request.true_cfg = 1.5;
  job.request.n = 2;
  job.request.seed = (uint64_t(1) << 62) + 7;  // past int64's half: kept exactly
  job.request.sigmas = {1.0, 0.5, 0.25};
  job.output_format = "webp";
  job.preview_every = 2;
  job.params_json = {{"prompt", "a fox"}};
  const auto limits = diffq::app::RequestLimits::server_defaults();
  const auto back = diffq::serve::job_from_spec(json::parse(diffq::serve::job_spec(job).dump()), limits, "");
  EXPECT_EQ(back->id, "job_1");
  EXPECT_EQ(back->model, "tiny-flux");
  EXPECT_EQ(back->output_format, "webp");
  EXPECT_EQ(back->preview_every, 2);
  EXPECT_EQ(back->params_json, job.params_json);
  const auto want = diffq::app::to_generate_params(job.request, false, limits);
  const auto& got = back->params;
  EXPECT_EQ(got.prompt, want.prompt);
  EXPECT_EQ(got.negative_prompt, want.negative_prompt);
  EXPECT_EQ(got.width, want.width);
  EXPECT_EQ(got.height, want.height);
  EXPECT_EQ(got.num_inference_steps, want.num_inference_steps);
  EXPECT_EQ(got.sigmas, want.sigmas);
  EXPECT_EQ(got.guidance_scale, want.guidance_scale);
  EXPECT_EQ(got.true_cfg_scale, want.true_cfg_scale);
  EXPECT_EQ(got.num_outputs, 2);
  EXPECT_EQ(got.seed, job.request.seed);
}

TEST(RedisJobSpec, BrokenSpecsNameTheField) {
  const auto limits = diffq::app::RequestLimits::server_defaults();
  const json ok = {{"id", "job_1"}, {"model", "m"}, {"kind", "image"}, {"request", {{"prompt", "p"}, {"steps", 2}}}};
  EXPECT_NO_THROW(diffq::serve::job_from_spec(ok, limits, ""));
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "spec"},
      {{{"model", "m"}, {"request", json::object()}}, "id"},
      {{{"id", "j"}, {"request", "text"}}, "request"},
      {{{"id", "j"}, {"kind", "audio"}, {"request", json::object()}}, "kind"},
      {{{"id", "j"}, {"request", {{"steps", "many"}}}}, "steps"},
      {{{"id", "j"}, {"request", {{"width", 1 << 20}}}}, "width"},  // past the worker's limits
      {{{"id", "j"}, {"request", {{"sigmas", {1, "x"}}}}}, "sigmas"},
      {{{"id", "j"}, {"request", json::object()}, {"output_format", "gif"}}, "output_format"},
      {{{"id", "j"}, {"request", json::object()}, {"loras", {{{"name", "style"}}}}}, "loras"},
  };
  for (const auto& [spec, field] : cases) {
    try {
      diffq::serve::job_from_spec(spec, limits, "");
      ADD_FAILURE() << "accepted " << spec.dump();
    } catch (const diffq::app::RequestError& e) {
      EXPECT_EQ(e.field, field) << spec.dump() << ": " << e.what();
    }
  }
}

}  // namespace
