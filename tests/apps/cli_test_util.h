// Running the built `diffq` binary from tests (DIFFQ_CLI_PATH is set by tests/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace diffq::testing {

struct CliResult {
  int status = -1;  // exit status (-1: did not exit normally)
  std::string out;  // stdout + stderr
};

// Runs `diffq <args>` (args already shell-quoted) in `dir`.
inline CliResult run_cli(const std::filesystem::path& dir, const std::string& args) {
  const std::string cmd = "cd '" + dir.string() + "' && '" DIFFQ_CLI_PATH "' " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace diffq::testing
