// `diffq serve` as a user runs it: the built binary with no -m serves the bundled tiny model on loopback;
// SIGTERM cancels the running job and exits 0; with --drain SIGINT lets the running job finish (its result
// file is there, complete) before exiting. Nothing half-written is left in the results folder.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Child {
  pid_t pid = -1;
  int port = 0;
  int err_fd = -1;
  std::string log;
};

// Starts `diffq serve --port 0 <args>` and reads its stderr until it says where it listens.
Child start(const std::vector<std::string>& args) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    std::vector<std::string> all = {DIFFQ_CLI_PATH, "serve", "--port", "0"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  c.err_fd = fds[0];
  char buf[512];
  const std::string key = "listening on http://127.0.0.1:";
  while (c.log.find(key) == std::string::npos || c.log.find('/', c.log.find(key) + key.size()) == std::string::npos) {
    const ssize_t n = read(c.err_fd, buf, sizeof buf);
    if (n <= 0) break;
    c.log.append(buf, size_t(n));
  }
  const auto at = c.log.find(key);
  if (at != std::string::npos) c.port = std::atoi(c.log.c_str() + at + key.size());
  return c;
}

// Reads the child's stderr to its end first, then reaps it: waiting before reading deadlocks as soon as
// the child writes more than a pipe holds at exit (LeakSanitizer's report is hundreds of KB).
int finish(Child& c) {
  char buf[4096];
  ssize_t n;
  while ((n = read(c.err_fd, buf, sizeof buf)) > 0) c.log.append(buf, size_t(n));
  close(c.err_fd);
  int st = 0;
  waitpid(c.pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

json get(int port, const std::string& path) {
  httplib::Client cl("127.0.0.1", port);
  auto r = cl.Get(path.c_str());
  return r ? json::parse(r->body) : json();
}

std::string post_job(int port, const json& body) {
  httplib::Client cl("127.0.0.1", port);
  auto r = cl.Post("/v1/jobs", body.dump(), "application/json");
  EXPECT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  return json::parse(r->body)["id"];
}

void wait_step(int port, const std::string& id, int step) {
  for (int i = 0; i < 5000; ++i) {
    const json j = get(port, "/v1/jobs/" + id);
    if (j.is_object() && j.value("step", 0) >= step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("diffq-serve-cli-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(d);
  return d;
}

TEST(ServeCli, DefaultModelAndSigtermCancels) {
  const fs::path dir = scratch("term");
  Child c = start({"--results-dir", dir.string()});
  ASSERT_GT(c.port, 0) << c.log;
  EXPECT_EQ(get(c.port, "/health")["status"], "ok");
  const json models = get(c.port, "/v1/models");
  EXPECT_EQ(models["data"][0]["id"], "demo-flux");
  const std::string id = post_job(c.port, {{"prompt", "long"}, {"steps", 150}, {"width", 128}, {"height", 128}});
  wait_step(c.port, id, 1);
  kill(c.pid, SIGTERM);
  EXPECT_EQ(finish(c), 0) << c.log;
  EXPECT_NE(c.log.find("cancelling"), std::string::npos) << c.log;
  EXPECT_NE(c.log.find("serve: stopped"), std::string::npos) << c.log;
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
  fs::remove_all(dir);
}

TEST(ServeCli, DrainFinishesTheRunningJob) {
  const fs::path dir = scratch("drain");
  Child c = start({"--results-dir", dir.string(), "--drain", "-m", "fox=tests/fixtures/tiny-flux"});
  ASSERT_GT(c.port, 0) << c.log;
  const std::string id = post_job(c.port, {{"prompt", "fox"}, {"steps", 8}, {"width", 64}, {"height", 64}});
  wait_step(c.port, id, 1);
  kill(c.pid, SIGINT);
  EXPECT_EQ(finish(c), 0) << c.log;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  ASSERT_EQ(files.size(), 1u) << c.log;
  EXPECT_EQ(files[0], id + "-0.png");
  fs::remove_all(dir);
}

}  // namespace
