// Where a test finds the checkout (tests/fixtures/, models/): the environment's DIFFQ_SOURCE_DIR when set
// and not empty, else the source path compiled in (the CMake define DIFFQ_SOURCE_DIR). A test binary
// carried to another machine (scripts/device-check.sh runs test_cuda on the GPU machine, where the build
// folder's path does not exist) is pointed at that machine's checkout through the variable.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace diffq::testing {

inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("DIFFQ_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return DIFFQ_SOURCE_DIR;
}

inline std::filesystem::path fixtures_dir() { return source_dir() / "tests" / "fixtures"; }

}  // namespace diffq::testing
