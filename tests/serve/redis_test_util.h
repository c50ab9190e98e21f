// For the scale-out tests: a real redis-server on a free loopback port in its own temp folder (append-only
// persistence on, so a restart keeps the queue), and `diffq serve` processes (API, workers) started as a
// user starts them, each logging to a file in that folder.
#pragma once

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "redis_client.h"

namespace diffq::testing {

class RedisProcess {
 public:
  // "" when redis-server is on PATH; else why these tests skip.
  static std::string missing() {
    return find_program({"redis-server"}).empty() ? "redis-server is not on PATH (Debian's redis-server package; "
                                                    "scripts/debian-packages.txt)"
                                                  : "";
  }
  // Starts it bound to 127.0.0.1 (the same port and folder again after stop()); true once it answers PING.
  bool start(const std::filesystem::path& dir) {
    dir_ = dir;
    std::filesystem::create_directories(dir_);
    if (port_ == 0) port_ = free_port();
    proc_ = std::make_unique<ChildProcess>();
    proc_->start({find_program({"redis-server"}), "--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir",
                  dir_.string(), "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes"},
                 dir_, dir_ / "redis.log");
    for (int i = 0; i < 250; ++i) {
      if (ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void stop() {
    if (proc_) proc_->stop();  // SIGTERM: Redis flushes its append-only file and exits
    proc_.reset();
  }
  bool ping() const {
    try {
      serve::RedisConnection c(serve::RedisUrl::parse(url()));
      return c.command({"PING"}).str == "PONG";
    } catch (const std::exception&) {
      return false;
    }
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return proc_ ? proc_->log_text() : ""; }

 private:
  std::filesystem::path dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> proc_;
};

// `diffq serve <args>` from the source folder; ready() waits for its first line (where it listens, or that
// the worker takes jobs).
class ServeProcess {
 public:
  ServeProcess(const std::vector<std::string>& args, const std::filesystem::path& log) : log_(log) {
    std::vector<std::string> argv = {DIFFQ_CLI_PATH, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    proc_.start(argv, std::filesystem::current_path(), log);
  }
  // True once the process said it listens (port() then set) or takes jobs; false when it exited or took
  // longer than `timeout`.
  bool ready(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    const std::string listen = "listening on http://127.0.0.1:";
    while (std::chrono::steady_clock::now() < until && proc_.running()) {
      const std::string t = proc_.log_text();
      if (const auto at = t.find(listen); at != std::string::npos && t.find('/', at + listen.size()) != std::string::npos) {
        port_ = std::atoi(t.c_str() + at + listen.size());
        return true;
      }
      if (t.find("worker taking jobs from") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  int port() const { return port_; }
  ChildProcess& process() { return proc_; }
  std::string log() const { return proc_.log_text(); }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    return c;
  }

 private:
  std::filesystem::path log_;
  ChildProcess proc_;
  int port_ = 0;
};

}  // namespace diffq::testing
