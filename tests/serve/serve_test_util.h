// A `diffq serve` server in-process on a loopback port (port 0: any free one), and an httplib client to it.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "io/png.h"
#include "server.h"
#include "server_state.h"

namespace diffq::testing {

class TestServer {
 public:
  explicit TestServer(diffq::serve::ServeOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    if (o.models.empty()) o.models.emplace_back("tiny-flux", "tests/fixtures/tiny-flux");
    if (o.results_dir.empty()) {
      o.results_dir = std::filesystem::temp_directory_path() /
                      ("diffq-serve-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
      std::filesystem::remove_all(o.results_dir);
    }
    results_dir = o.results_dir;
    server = std::make_unique<diffq::serve::Server>(o);
    port = server->bind();
    thread = std::thread([this] { server->listen_after_bind(); });
    for (int i = 0; i < 500 && !server->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~TestServer() {
    server->stop(false);
    thread.join();
    server.reset();
    std::filesystem::remove_all(results_dir);
  }
  std::unique_ptr<httplib::Client> client(const std::string& key = "") const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_read_timeout(120, 0);
    if (!key.empty()) c->set_default_headers({{"Authorization", "Bearer " + key}});
    return c;
  }
  std::unique_ptr<diffq::serve::Server> server;
  std::filesystem::path results_dir;
  int port = 0;
  std::thread thread;

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
};

inline nlohmann::json body_json(const httplib::Result& r) { return nlohmann::json::parse(r->body); }

// What `diffq generate -m tests/fixtures/tiny-flux -o ref.png ARGS` writes, run in `dir` (created): the image
// `read` (ref.png, or ref-1.png ... with --num-images) that a served job must equal.
inline diffq::io::PngImage generate_reference(const std::string& args, const std::filesystem::path& dir,
                                              const std::string& read = "ref.png") {
  std::filesystem::create_directories(dir);
  const std::string cmd = "cd '" + dir.string() + "' && '" DIFFQ_CLI_PATH "' generate -m '" +
                          std::filesystem::absolute("tests/fixtures/tiny-flux").string() + "' -o ref.png " + args +
                          " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  return diffq::io::read_png(dir / read);
}

}  // namespace diffq::testing
