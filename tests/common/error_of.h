// The message of the diffq::Error that f() throws, or "" when it throws none (tests that check what an
// error says).
#pragma once

#include <functional>
#include <string>

#include "diffq/error.h"

namespace diffq::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace diffq::testing
