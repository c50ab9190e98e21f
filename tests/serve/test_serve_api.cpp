// The server's synchronous APIs on loopback with the bundled tiny FLUX model: OpenAI images, A1111 txt2img,
// models / health / metrics / page; the images must be the pixels `diffq generate` writes for the same
// parameters and seed; every invalid request gets its documented status and a JSON error naming the field;
// the API key is enforced.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/png.h"
#include "serve_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::body_json;
using diffq::testing::TestServer;
using nlohmann::json;

std::string b64decode(const std::string& s) {
  std::string out;
  int val = 0, bits = -8;
  for (unsigned char c : s) {
    int d;
    if (c >= 'A' && c <= 'Z') d = c - 'A';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
    else if (c >= '0' && c <= '9') d = c - '0' + 52;
    else if (c == '+') d = 62;
    else if (c == '/') d = 63;
    else break;
    val = (val << 6) + d;
    bits += 6;
    if (bits >= 0) {
      out.push_back(char((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

diffq::io::PngImage decode(const std::string& bytes) {
  return diffq::io::decode_png(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "response");
}

// `diffq generate` with `args` -> the PNG's pixels (the reference the server must reproduce).
diffq::io::PngImage cli_reference(const std::string& args, const std::string& name,
                                  const std::string& read = "ref.png") {
  const fs::path dir = fs::temp_directory_path() / ("diffq-serve-ref-" + std::to_string(::getpid()) + "-" + name);
  auto img = diffq::testing::generate_reference(args, dir, read);
  fs::remove_all(dir);
  return img;
}

class ServeApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new TestServer({}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static TestServer* server_;
};
TestServer* ServeApi::server_ = nullptr;

TEST_F(ServeApi, HealthModelsMetricsPage) {
  auto c = server_->client();
  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(body_json(h)["status"], "ok");
  auto m = c->Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = body_json(m)["data"];
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["id"], "tiny-flux");
  EXPECT_EQ(models[0]["kind"], "image");
  EXPECT_TRUE(models[0]["loaded"].get<bool>());
  EXPECT_GT(models[0]["defaults"]["width"].get<int>(), 0);
  EXPECT_EQ(models[0]["defaults"]["steps"], 28);
  auto x = c->Get("/metrics");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->status, 200);
  for (const char* k : {"diffq_queue_length ", "diffq_jobs{state=\"completed\"}", "diffq_step_seconds_sum",
                        "diffq_memory_bytes{kind=\"allocator_peak\"}", "diffq_memory_bytes{kind=\"process_rss\"}"})
    EXPECT_NE(x->body.find(k), std::string::npos) << k;
  auto page = c->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  auto none = c->Get("/nope");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_TRUE(body_json(none).contains("error"));
}

TEST_F(ServeApi, OpenAiImageEqualsCliGenerate) {
  const auto ref = cli_reference("-p 'a red fox' --steps 2 --width 64 --height 48 --seed 5", "openai");
  auto c = server_->client();
  const json req = {{"prompt", "a red fox"}, {"size", "64x48"}, {"steps", 2}, {"seed", 5},
                    {"response_format", "b64_json"}, {"model", "tiny-flux"}};
  auto r = c->Post("/v1/images/generations", req.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = body_json(r);
  EXPECT_GT(j["created"].get<int64_t>(), 0);
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["revised_prompt"], "a red fox");
  const auto img = decode(b64decode(j["data"][0]["b64_json"]));
  EXPECT_EQ(img.width, 64);
  EXPECT_EQ(img.height, 48);
  EXPECT_EQ(img.rgb, ref.rgb);  // the same pixels as diffq generate

  // n = 2: one batch of noise from the seed, as `diffq generate --num-images 2`.
  const auto ref1 = cli_reference("-p 'a cat' --steps 2 --width 32 --height 32 --seed 7 --num-images 2", "openai-n2",
                                  "ref-1.png");
  auto r2 = c->Post("/v1/images/generations",
                    json{{"prompt", "a cat"}, {"size", "32x32"}, {"steps", 2}, {"seed", 7}, {"n", 2}}.dump(),
                    "application/json");
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200) << r2->body;
  ASSERT_EQ(body_json(r2)["data"].size(), 2u);
  EXPECT_EQ(decode(b64decode(body_json(r2)["data"][1]["b64_json"])).rgb, ref1.rgb);
}

TEST_F(ServeApi, OpenAiJpegAndWebp) {
  auto c = server_->client();
  for (const std::string fmt : {"jpeg", "webp"}) {
    auto r = c->Post("/v1/images/generations",
                     json{{"prompt", "x"}, {"size", "32x32"}, {"steps", 1}, {"output_format", fmt}}.dump(),
                     "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string bytes = b64decode(body_json(r)["data"][0]["b64_json"]);
    ASSERT_GT(bytes.size(), 12u);
    if (fmt == "jpeg") {
      EXPECT_EQ(uint8_t(bytes[0]), 0xFF);
      EXPECT_EQ(uint8_t(bytes[1]), 0xD8);
    } else {
      EXPECT_EQ(bytes.substr(0, 4), "RIFF");
      EXPECT_EQ(bytes.substr(8, 4), "WEBP");
    }
  }
}

TEST_F(ServeApi, A1111Txt2imgEqualsCliGenerate) {
  const auto ref = cli_reference("-p 'a boat' --steps 2 --width 32 --height 48 --seed 11 --guidance 4", "a1111");
  auto c = server_->client();
  const json req = {{"prompt", "a boat"}, {"width", 32}, {"height", 48}, {"steps", 2}, {"seed", 11},
                    {"cfg_scale", 4.0}, {"batch_size", 1}, {"sampler_name", "Euler"}};
  auto r = c->Post("/sdapi/v1/txt2img", req.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = body_json(r);
  ASSERT_EQ(j["images"].size(), 1u);
  EXPECT_EQ(decode(b64decode(j["images"][0])).rgb, ref.rgb);
  EXPECT_EQ(j["parameters"]["prompt"], "a boat");
  const json info = json::parse(j["info"].get<std::string>());
  EXPECT_EQ(info["seed"], 11);
  EXPECT_EQ(info["steps"], 2);

  // seed -1: a random seed, reported in info.
  auto rr = c->Post("/sdapi/v1/txt2img", json{{"prompt", "x"}, {"width", 32}, {"height", 32}, {"steps", 1}, {"seed", -1}}.dump(),
                    "application/json");
  ASSERT_TRUE(rr);
  ASSERT_EQ(rr->status, 200) << rr->body;
  const json info2 = json::parse(body_json(rr)["info"].get<std::string>());
  EXPECT_TRUE(info2["seed"].is_number_unsigned() || info2["seed"].get<int64_t>() >= 0);

  auto p = c->Get("/sdapi/v1/progress");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 200);
  EXPECT_TRUE(body_json(p)["state"].contains("sampling_steps"));
  auto i = c->Post("/sdapi/v1/interrupt", "", "application/json");
  ASSERT_TRUE(i);
  EXPECT_EQ(i->status, 200);
  auto sm = c->Get("/sdapi/v1/sd-models");
  ASSERT_TRUE(sm);
  EXPECT_EQ(body_json(sm)[0]["model_name"], "tiny-flux");
}

struct Bad {
  std::string path, body;
  int status;
  std::string field;
};

TEST_F(ServeApi, InvalidRequestsGetStatusAndField) {
  auto c = server_->client();
  const std::vector<Bad> cases = {
      {"/v1/jobs", "{\"prompt\": ", 400, "body"},
      {"/v1/jobs", "[1, 2]", 400, "body"},
      {"/v1/jobs", "{}", 400, "prompt"},
      {"/v1/jobs", R"({"prompt": 5})", 400, "prompt"},
      {"/v1/jobs", R"({"prompt": "x", "steps": "many"})", 400, "steps"},
      {"/v1/jobs", R"({"prompt": "x", "steps": 2.5})", 400, "steps"},
      {"/v1/jobs", R"({"prompt": "x", "guidance": "high"})", 400, "guidance"},
      {"/v1/jobs", R"({"prompt": "x", "steps": 151})", 422, "steps"},
      {"/v1/jobs", R"({"prompt": "x", "steps": 0})", 422, "steps"},
      {"/v1/jobs", R"({"prompt": "x", "width": 5000, "height": 64})", 422, "width"},
      {"/v1/jobs", R"({"prompt": "x", "width": 4000, "height": 4000})", 422, "size"},
      {"/v1/jobs", R"({"prompt": "x", "n": 9})", 422, "n"},
      {"/v1/jobs", R"({"prompt": "x", "frames": 17})", 422, "frames"},  // an image model
      {"/v1/jobs", R"({"prompt": "x", "seed": -5})", 422, "seed"},
      {"/v1/jobs", R"({"prompt": "x", "model": "nope"})", 404, "model"},
      {"/v1/jobs", "{\"prompt\": \"" + std::string(4001, 'a') + "\"}", 422, "prompt"},
      {"/v1/jobs", "{\"prompt\": \"" + std::string(2 << 20, 'a') + "\"}", 413, "body"},
      {"/v1/images/generations", R"({"prompt": "x", "size": "big"})", 400, "size"},
      {"/v1/images/generations", R"({"prompt": "x", "response_format": "png"})", 400, "response_format"},
      {"/v1/images/generations", R"({"prompt": "x", "output_format": "gif"})", 400, "output_format"},
      {"/v1/images/generations", R"({"prompt": "x", "n": 100})", 422, "n"},
      {"/v1/images/generations", R"({"size": "64x64"})", 400, "prompt"},
      {"/sdapi/v1/txt2img", R"({"prompt": "x", "cfg_scale": "7"})", 400, "cfg_scale"},
      {"/sdapi/v1/txt2img", R"({"prompt": "x", "steps": 1000})", 422, "steps"},
      {"/sdapi/v1/txt2img", R"({"prompt": "x", "batch_size": 0})", 422, "batch_size"},
      {"/v1/images/generations", R"({"prompt": "x", "size": "9000x64"})", 422, "size"},
      // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong '/', a surrogate): a
      // 400 naming the body, never a 500 with the JSON library's text.
      {"/v1/jobs", "{\"prompt\": \"a \x80 b\"}", 400, "body"},
      {"/v1/images/generations", "{\"prompt\": \"fox \xE2\x82\"}", 400, "body"},
      {"/sdapi/v1/txt2img", "{\"prompt\": \"\xC0\xAF\"}", 400, "body"},
      {"/v1/jobs", "{\"prompt\": \"\xED\xA0\x80\"}", 400, "body"},
      // A number beyond a double (the JSON library's out_of_range, found by fuzz_request_params).
      {"/v1/jobs", R"({"prompt": "x", "steps": 1e400})", 400, "body"},
      {"/sdapi/v1/txt2img", R"({"prompt": "x", "seed": 111111111000000000000000000000000000000E0000163971})", 400, "body"},
  };
  for (const auto& b : cases) {
    auto r = c->Post(b.path.c_str(), b.body, "application/json");
    ASSERT_TRUE(r) << b.path << " " << b.body.substr(0, 80);
    EXPECT_EQ(r->status, b.status) << b.path << " " << b.body.substr(0, 80) << " -> " << r->body;
    json j;
    ASSERT_NO_THROW(j = json::parse(r->body)) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_EQ(j["error"]["message"].get<std::string>().find("json.exception"), std::string::npos)
        << "a library's exception text reached the client: " << r->body;
    EXPECT_EQ(j["error"]["field"], b.field) << b.path << " " << b.body.substr(0, 80) << " -> " << r->body;
    if ((b.status == 422 || b.status == 413) && b.field != "frames") {  // frames on an image model: no limit
      EXPECT_TRUE(j["error"].contains("limit")) << r->body;
    }
  }
  auto g = c->Get("/v1/jobs/job_doesnotexist");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 404);
  auto d = c->Delete("/v1/jobs/job_doesnotexist");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 404);
}

TEST(ServeAuth, BearerKeyEnforced) {
  diffq::serve::ServeOptions o;
  o.api_key = "s3cret";
  TestServer s(o);
  auto anon = s.client();
  for (const char* path : {"/v1/models", "/v1/jobs", "/metrics", "/sdapi/v1/progress"}) {
    auto r = anon->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(body_json(r)["error"]["field"], "Authorization");
  }
  auto post = anon->Post("/v1/jobs", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
  auto wrong = s.client("guess")->Get("/v1/models");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(body_json(wrong)["error"]["message"], "wrong API key");
  auto ok = s.client("s3cret")->Get("/v1/models");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  // The page and the health check stay open (the page asks for the key).
  EXPECT_EQ(anon->Get("/")->status, 200);
  EXPECT_EQ(anon->Get("/health")->status, 200);
}

}  // namespace

namespace diffq::serve {
namespace {
// The UTF-8 check behind the 400 above, byte by byte (RFC 3629).
TEST(ServeUtf8, FirstInvalidByte) {
  EXPECT_EQ(first_invalid_utf8(""), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("a red fox \xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\xA6\x8A"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);               // lone continuation byte
  EXPECT_EQ(first_invalid_utf8("ab\xE2\x82"), 2u);           // truncated 3-byte sequence
  EXPECT_EQ(first_invalid_utf8("x\xC0\xAF"), 1u);            // overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);         // UTF-16 surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);     // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok\xFF"), 2u);               // never a lead byte
  EXPECT_EQ(first_invalid_utf8("\xE2\x28\xA1"), 0u);         // bad continuation
}
}  // namespace
}  // namespace diffq::serve
