// Requests' "loras" on the jobs and OpenAI APIs: [{"name", "scale"}] names files in --lora-dir; the job's image
// equals `diffq generate --lora ...` with the same adapters and scales (whose latents equal Diffusers + PEFT's,
// tests/apps/test_cli_lora.cpp), a later job without "loras" runs the base model again, and bad names are 422s.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "apps/cli_test_util.h"
#include "io/png.h"
#include "serve_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::body_json;
using diffq::testing::TestServer;
using nlohmann::json;

const std::string kLora = DIFFQ_SOURCE_DIR "/tests/fixtures/lora";

std::vector<uint8_t> job_pixels(const TestServer& s, const json& body) {
  auto r = s.client()->Post("/v1/jobs", body.dump(), "application/json");
  EXPECT_EQ(r->status, 202) << r->body;
  const std::string id = body_json(r)["id"];
  for (int i = 0; i < 6000; ++i) {
    const json j = body_json(s.client()->Get(("/v1/jobs/" + id).c_str()));
    if (j["status"] != "queued" && j["status"] != "running") {
      EXPECT_EQ(j["status"], "completed") << j.dump();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto res = s.client()->Get(("/v1/jobs/" + id + "/result").c_str());
  EXPECT_EQ(res->status, 200);
  return diffq::io::decode_png(reinterpret_cast<const uint8_t*>(res->body.data()), res->body.size(), "result").rgb;
}

std::vector<uint8_t> cli_pixels(const fs::path& dir, const std::string& extra) {
  const auto r = diffq::testing::run_cli(dir, "generate -m '" DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux' -p 'a red fox' --steps 2 --width 32 --height 32 --seed 3 -o c.png " + extra);
  EXPECT_EQ(r.status, 0) << r.out;
  return diffq::io::read_png(dir / "c.png").rgb;
}

TEST(ServeLora, JobLorasEqualTheCliAndGoAwayWhenNotAsked) {
  const fs::path dir = fs::temp_directory_path() / ("diffq-serve-lora-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  diffq::serve::ServeOptions o;
  o.lora_dir = kLora;
  TestServer s(o);
  const json base = {{"prompt", "a red fox"}, {"steps", 2}, {"width", 32}, {"height", 32}, {"seed", 3}};
  json with = base;
  with["loras"] = json::array({{{"name", "peft_a"}, {"scale", 0.7}}, {{"name", "peft_b_alpha"}, {"scale", -0.4}}});
  const auto want = cli_pixels(dir, "--lora '" + kLora + "/peft_a.safetensors:0.7' --lora '" + kLora +
                                        "/peft_b_alpha.safetensors:-0.4'");
  const auto plain = cli_pixels(dir, "");
  EXPECT_NE(want, plain);  // the adapters change the image
  EXPECT_EQ(job_pixels(s, with), want);
  EXPECT_EQ(job_pixels(s, base), plain);  // loaded but inactive
  EXPECT_EQ(job_pixels(s, with), want);   // active again (no reload)
  fs::remove_all(dir);

  // Bad names: 422 naming the field, before any job runs.
  for (const std::string bad : {"nope", "../lora/peft_a", ""}) {
    json b = base;
    b["loras"] = json::array({{{"name", bad}}});
    auto r = s.client()->Post("/v1/jobs", b.dump(), "application/json");
    EXPECT_GE(r->status, 400) << bad;
    EXPECT_EQ(body_json(r)["error"]["field"], "loras") << r->body;
  }
}

TEST(ServeLora, AServerWithoutLoraDirRefusesLoras) {
  TestServer s({});
  const json b = {{"prompt", "x"}, {"loras", json::array({{{"name", "peft_a"}}})}};
  auto r = s.client()->Post("/v1/jobs", b.dump(), "application/json");
  EXPECT_EQ(r->status, 422);
  EXPECT_NE(r->body.find("--lora-dir"), std::string::npos) << r->body;
}

}  // namespace
