// Running the built `diffq` binary from tests (DIFFQ_CLI_PATH is set by tests/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace diffq::testing {

struct CliResult {
  int status = -1;  // exit status (-1: did not exit normally)
  std::string out;  // stdout + stderr
};

// Runs `diffq <args>` (args already shell-quoted) in `dir`.
// max |got - want| / max |want| (same sizes; infinity otherwise).
inline double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, double(std::fabs(got[i] - want[i])));
    den = std::max(den, double(std::fabs(want[i])));
  }
  return num / den;
}

// Runs `env <env> diffq <args>` (args already shell-quoted) in `dir`; stderr joins stdout unless
// `stdout_only` (for output that is parsed, e.g. --json).
inline CliResult run_cli_env(const std::filesystem::path& dir, const std::string& env, const std::string& args,
                             bool stdout_only = false) {
  const std::string cmd = "cd '" + dir.string() + "' && env " + env + " '" DIFFQ_CLI_PATH "' " + args +
                          (stdout_only ? " 2>/dev/null" : " 2>&1");
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

inline CliResult run_cli(const std::filesystem::path& dir, const std::string& args) { return run_cli_env(dir, "", args); }

}  // namespace diffq::testing
