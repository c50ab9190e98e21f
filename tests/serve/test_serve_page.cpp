// The web page of `diffq serve` in a real browser: headless Chromium driven through chromedriver's W3C
// WebDriver API. The test starts `diffq serve` on the tiny FLUX fixture, loads "/" at a phone's window
// size, fills the form, starts a job, watches the progress bar advance step by step and the image arrive in
// the gallery, and keeps a screenshot (build/test-artifacts/serve-page.png).
//
// It skips, saying what is missing, where chromium / chromedriver (Debian: chromium, chromium-driver) are
// not installed or the diffq binary has no `serve` command. DIFFQ_TEST_SERVE_URL=http://host:port drives
// a server that is already running instead of starting one.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io/png.h"
#include "serve/child_process.h"
#include "serve/webdriver.h"

namespace fs = std::filesystem;
using diffq::testing::ChildProcess;
using diffq::testing::WebDriver;
using nlohmann::json;

namespace {

const fs::path kSource = DIFFQ_SOURCE_DIR;
const fs::path kArtifacts = DIFFQ_TEST_ARTIFACTS_DIR;
constexpr int kPhoneWidth = 412, kPhoneHeight = 915;

// Polls `ok` every 100 ms until it holds or `seconds` pass.
template <class F>
bool wait_for(double seconds, F&& ok) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (ok()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Whether the binary has the `serve` command: its help names --port (an unknown subcommand followed by
// --help prints the main help and exits 0, so the status alone does not tell).
bool has_serve_command() {
  FILE* p = popen("'" DIFFQ_CLI_PATH "' serve --help 2>&1", "r");
  if (!p) return false;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 && out.find("--port") != std::string::npos;
}

class ServePage : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(kArtifacts);
    chromedriver_ = diffq::testing::find_program({"chromedriver"});
    chromium_ = diffq::testing::find_program({"chromium", "chromium-browser", "google-chrome"});
    std::string missing;
    if (chromium_.empty()) missing += " chromium (Debian package `chromium`)";
    if (chromedriver_.empty()) missing += " chromedriver (Debian package `chromium-driver`)";
    if (!missing.empty()) GTEST_SKIP() << "not installed:" << missing << "; see scripts/debian-packages.txt";

    external_url_ = std::getenv("DIFFQ_TEST_SERVE_URL") ? std::getenv("DIFFQ_TEST_SERVE_URL") : "";
    if (external_url_.empty() && !has_serve_command())
      GTEST_SKIP() << DIFFQ_CLI_PATH << " has no `serve` command (`diffq serve --help` does not list --port): nothing to test";

    const int wd_port = diffq::testing::free_port();
    ASSERT_GT(wd_port, 0);
    ASSERT_TRUE(driver_proc_.start({chromedriver_, "--port=" + std::to_string(wd_port)}, kArtifacts,
                                   kArtifacts / "serve-page-chromedriver.log"));
    wd_ = std::make_unique<WebDriver>(wd_port);
    ASSERT_TRUE(wait_for(30, [&] { return !driver_proc_.running() || wd_->ready(); }) && driver_proc_.running())
        << "chromedriver did not start:\n" << driver_proc_.log_text();
    // A phone's screen (412 x 915 CSS pixels: the window, and Chrome's mobile emulation, since headless
    // windows are at least 500 px wide); --no-sandbox: CI containers run as root.
    wd_->new_session(chromium_,
                     {"--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=412,915",
                      "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check"},
                     kPhoneWidth, kPhoneHeight);
  }

  // `diffq serve` on the tiny FLUX fixture with `extra` options (or the DIFFQ_TEST_SERVE_URL server).
  void start_server(const std::vector<std::string>& extra = {}) {
    if (!external_url_.empty()) {
      if (!extra.empty()) GTEST_SKIP() << "needs its own server (DIFFQ_TEST_SERVE_URL is set)";
      base_url_ = external_url_;
      return;
    }
    const int port = diffq::testing::free_port();
    ASSERT_GT(port, 0) << "no free loopback port";
    base_url_ = "http://127.0.0.1:" + std::to_string(port);
    std::vector<std::string> argv = {DIFFQ_CLI_PATH, "serve", "-m", (kSource / "tests/fixtures/tiny-flux").string(),
                                     "--host", "127.0.0.1", "--port", std::to_string(port)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(server_.start(argv, kSource, kArtifacts / "serve-page-server.log"));
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    const bool up = wait_for(120, [&] {
      if (!server_.running()) return true;  // reported below
      auto r = c.Get("/health");
      return r && r->status == 200;
    });
    ASSERT_TRUE(up && server_.running()) << "diffq serve did not answer GET /health on port " << port
                                         << " (exit status " << server_.exit_status() << "):\n"
                                         << server_.log_text();
  }

  // Waits for the model list (GET /v1/models) to fill the select.
  bool models_loaded(double seconds = 30) {
    return wait_for(seconds, [&] {
      return wd_->execute("const s = document.querySelector('#model');"
                          "return !!s && s.options.length > 0 && s.options[0].value !== '';")
          .get<bool>();
    });
  }

  std::string chromedriver_, chromium_, base_url_, external_url_;
  ChildProcess server_, driver_proc_;
  std::unique_ptr<WebDriver> wd_;
};

TEST_F(ServePage, GeneratesAnImageWithLiveProgress) {
  ASSERT_NO_FATAL_FAILURE(start_server());
  if (IsSkipped()) return;
  wd_->navigate(base_url_ + "/");
  ASSERT_TRUE(models_loaded()) << "the model list never filled";
  EXPECT_TRUE(wd_->execute("return document.querySelector('#frames-row').hidden;").get<bool>())
      << "the frames field shows for an image model";

  wd_->type_into("#prompt", "a red fox in the snow");
  wd_->type_into("#width", "64");
  wd_->type_into("#height", "64");
  wd_->type_into("#steps", "2");
  wd_->type_into("#seed", "7");

  // Every value the progress bar leaves, however fast the steps come: each change's old value (a
  // MutationObserver on the jobs list; several changes in one task still give one record each).
  wd_->execute(R"(
    window.__progress = [];
    new MutationObserver((records) => {
      for (const r of records)
        if (r.target.matches('progress') && r.attributeName === 'value')
          window.__progress.push(Number(r.oldValue));
    }).observe(document.querySelector('#jobs'),
               { subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ['value'] });)");
  wd_->click(wd_->find("#generate"));

  // Poll the bar while the job runs, until the image is in the gallery and decoded.
  std::vector<double> polled;
  const bool done = wait_for(180, [&] {
    const json v = wd_->execute(R"(
      const p = document.querySelector('#jobs progress');
      const img = document.querySelector('#gallery figure img');
      const err = document.querySelector('#error');
      return { value: p ? Number(p.getAttribute('value')) : null,
               loaded: !!img && img.complete && img.naturalWidth > 0,
               error: err.hidden ? '' : err.textContent,
               failed: [...document.querySelectorAll('.job.failed .job-text')].map(e => e.textContent).join(' ') };)");
    if (v["value"].is_number()) polled.push_back(v["value"].get<double>());
    return v["loaded"].get<bool>() || !v["error"].get<std::string>().empty() || !v["failed"].get<std::string>().empty();
  });
  const json state = wd_->execute(R"(
    const img = document.querySelector('#gallery figure img');
    const cap = document.querySelector('#gallery figure figcaption');
    return { w: img ? img.naturalWidth : 0, h: img ? img.naturalHeight : 0,
             caption: cap ? cap.textContent : '',
             error: document.querySelector('#error').hidden ? '' : document.querySelector('#error').textContent,
             failed: [...document.querySelectorAll('.job.failed .job-text')].map(e => e.textContent).join(' '),
             progress: window.__progress,
             live: document.querySelectorAll('#jobs .job:not(.failed)').length };)");

  // The screenshot is kept whatever happened (it shows what went wrong), scrolled to the newest result.
  wd_->execute("const f = document.querySelector('#gallery figure') || document.querySelector('#jobs');"
               "f.scrollIntoView({block: 'center'});");
  const std::vector<uint8_t> png = wd_->screenshot();
  const fs::path shot = kArtifacts / "serve-page.png";
  std::ofstream(shot, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));

  ASSERT_TRUE(done) << "no image in the gallery after 180 s; progress values polled: " << polled.size()
                    << "; page state: " << state.dump();
  EXPECT_EQ(state["error"], "") << "the page shows an error";
  EXPECT_EQ(state["failed"], "") << "the job failed";
  EXPECT_EQ(state["w"], 64);
  EXPECT_EQ(state["h"], 64);
  const std::string caption = state["caption"].get<std::string>();
  EXPECT_NE(caption.find("a red fox in the snow"), std::string::npos) << caption;
  EXPECT_NE(caption.find("64\u00d764"), std::string::npos) << caption;
  EXPECT_NE(caption.find("seed7"), std::string::npos) << caption;  // <dt>seed</dt><dd>7</dd>

  // The bar advanced step by step, 0 -> 1 -> 2, not straight to the end: the observer saw each value it
  // left (the page sets it once more, to full, when the job completes; the card then goes away).
  std::vector<int> seen;
  for (const json& x : state["progress"]) seen.push_back(x.get<int>());
  std::vector<int> steps_seen;
  for (int x : seen)
    if (steps_seen.empty() || steps_seen.back() != x) steps_seen.push_back(x);
  EXPECT_EQ(steps_seen, (std::vector<int>{0, 1, 2})) << "progress values left: " << json(seen).dump()
                                                     << "; polled " << json(polled).dump();
  EXPECT_EQ(state["live"], 0) << "the finished job's card is still in the jobs list";

  // The screenshot is a PNG of the phone-sized viewport.
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(std::string(png.begin(), png.begin() + 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const diffq::io::PngImage img = diffq::io::decode_png(png.data(), png.size(), shot.string());
  EXPECT_EQ(img.width, kPhoneWidth);
  EXPECT_EQ(img.height, kPhoneHeight);
  // Nothing wider than the phone's screen (no sideways scrolling).
  EXPECT_LE(wd_->execute("return document.documentElement.scrollWidth;").get<int>(), kPhoneWidth);
  std::printf("[ServePage] screenshot %s (%lld x %lld); progress values %s\n", shot.c_str(),
              static_cast<long long>(img.width), static_cast<long long>(img.height), json(seen).dump().c_str());
}

// With --api-key the page asks for the key (the APIs answer 401), keeps it, and every later call (the job,
// its events, its result) carries it.
TEST_F(ServePage, AsksForTheApiKey) {
  ASSERT_NO_FATAL_FAILURE(start_server({"--api-key", "s3cret-key"}));
  if (IsSkipped()) return;
  wd_->navigate(base_url_ + "/");
  const auto dialog_open = [&] { return wd_->execute("return document.querySelector('#key-dialog').open;").get<bool>(); };
  ASSERT_TRUE(wait_for(30, dialog_open)) << "no key dialog after the 401 of GET /v1/models";
  // A wrong key is refused and asked for again.
  wd_->type_into("#api-key", "wrong");
  wd_->click(wd_->find("#key-save"));
  ASSERT_TRUE(wait_for(30, [&] {
    return dialog_open() &&
           wd_->execute("return document.querySelector('#key-message').textContent;").get<std::string>().find("rejected") !=
               std::string::npos;
  })) << "a wrong key was not asked for again";
  wd_->type_into("#api-key", "s3cret-key");
  wd_->click(wd_->find("#key-save"));
  ASSERT_TRUE(models_loaded()) << "the model list never filled after the key was given";
  EXPECT_EQ(wd_->execute("return localStorage.getItem('diffq.apiKey');"), "s3cret-key");

  wd_->type_into("#prompt", "a lighthouse");
  wd_->type_into("#width", "32");
  wd_->type_into("#height", "32");
  wd_->type_into("#steps", "1");
  wd_->click(wd_->find("#generate"));
  const bool done = wait_for(180, [&] {
    return wd_->execute("const i = document.querySelector('#gallery figure img');"
                        "return (!!i && i.complete && i.naturalWidth > 0) || !document.querySelector('#error').hidden ||"
                        "  document.querySelector('#key-dialog').open || !!document.querySelector('.job.failed');")
        .get<bool>();
  });
  const json state = wd_->execute(
      "const i = document.querySelector('#gallery figure img');"
      "return { w: i ? i.naturalWidth : 0, dialog: document.querySelector('#key-dialog').open,"
      "         error: document.querySelector('#error').textContent,"
      "         failed: [...document.querySelectorAll('.job.failed')].map(e => e.textContent).join(' ') };");
  ASSERT_TRUE(done) << state.dump();
  EXPECT_EQ(state["w"], 32) << state.dump();
  EXPECT_FALSE(state["dialog"].get<bool>()) << "asked for the key again";
}

// A video model (Wan): choosing it shows the frames field, and the result plays in a <video> element.
TEST_F(ServePage, PlaysAVideoResult) {
  ASSERT_NO_FATAL_FAILURE(start_server({"-m", "tiny-wan=" + (kSource / "tests/fixtures/tiny-wan").string()}));
  if (IsSkipped()) return;
  wd_->navigate(base_url_ + "/");
  ASSERT_TRUE(models_loaded()) << "the model list never filled";
  // Two models now: tiny-flux (the first -m, image) and tiny-wan (video).
  const json ids = wd_->execute("return [...document.querySelectorAll('#model option')].map(o => o.value);");
  ASSERT_NE(std::find(ids.begin(), ids.end(), json("tiny-wan")), ids.end()) << ids.dump();
  wd_->execute("const s = document.querySelector('#model'); s.value = 'tiny-wan';"
               "s.dispatchEvent(new Event('change'));");
  EXPECT_FALSE(wd_->execute("return document.querySelector('#frames-row').hidden;").get<bool>())
      << "no frames field for a video model";
  wd_->type_into("#prompt", "a cat surfing");
  wd_->type_into("#width", "32");
  wd_->type_into("#height", "32");
  wd_->type_into("#steps", "2");
  wd_->type_into("#frames", "5");
  wd_->type_into("#seed", "1");
  wd_->click(wd_->find("#generate"));
  // Loaded metadata (readyState >= 1) means the browser parsed the mp4 it got.
  const bool done = wait_for(180, [&] {
    return wd_->execute("const v = document.querySelector('#gallery figure video');"
                        "return (!!v && v.readyState >= 1) || !document.querySelector('#error').hidden ||"
                        "  !!document.querySelector('.job.failed');")
        .get<bool>();
  });
  const json state = wd_->execute(
      "const v = document.querySelector('#gallery figure video');"
      "return { w: v ? v.videoWidth : 0, h: v ? v.videoHeight : 0, controls: !!v && v.controls,"
      "         error: v && v.error ? v.error.message : '', caption: v ? v.parentElement.textContent : '',"
      "         page_error: document.querySelector('#error').textContent,"
      "         failed: [...document.querySelectorAll('.job.failed')].map(e => e.textContent).join(' ') };");
  ASSERT_TRUE(done) << state.dump();
  EXPECT_EQ(state["w"], 32) << state.dump();
  EXPECT_EQ(state["h"], 32) << state.dump();
  EXPECT_TRUE(state["controls"].get<bool>());
  EXPECT_NE(state["caption"].get<std::string>().find("frames5"), std::string::npos) << state.dump();
}

}  // namespace
