// A child process for tests (the server, chromedriver): started with fork/exec, output to a log file,
// stopped (SIGTERM, then SIGKILL) when the object goes away. Plus a free loopback port and PATH lookup.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace diffq::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

// The first of `names` found as an executable in $PATH (or given as a path), else "".
inline std::string find_program(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  for (const std::string& n : names) {
    if (n.find('/') != std::string::npos) {
      if (::access(n.c_str(), X_OK) == 0) return n;
      continue;
    }
    std::stringstream dirs(path ? path : "/usr/bin:/bin");
    std::string d;
    while (std::getline(dirs, d, ':')) {
      const std::string p = (d.empty() ? "." : d) + "/" + n;
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return "";
}

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { stop(); }

  // Starts argv[0] with argv in `dir`, stdout and stderr appended to `log`. False if fork failed.
  bool start(const std::vector<std::string>& argv, const std::filesystem::path& dir, const std::filesystem::path& log) {
    log_ = log;
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::setpgid(0, 0);  // its own group: stop() also ends what it started (chromedriver's browser)
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      if (::chdir(dir.c_str()) != 0) ::_exit(126);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here: whichever runs first wins the race with stop()
    return true;
  }

  // True while the process has not exited; once it has, exit_status() says how.
  bool running() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = st;
      pid_ = -1;
      return false;
    }
    return true;
  }
  int exit_status() const { return status_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` to the process alone (SIGKILL: a worker that dies mid-job, leaving no chance to clean up).
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits up to `timeout` for the process to exit; true when it has.
  bool wait_exit(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
  }

  std::string log_text() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  std::filesystem::path log_;
};

}  // namespace diffq::testing
