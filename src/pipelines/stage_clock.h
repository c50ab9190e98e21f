// Wall time of a pipeline call's stages (encode prompt, denoise, decode): lap() returns the seconds since
// the previous lap (or since construction).
#pragma once

#include <chrono>

namespace diffq {

class StageClock {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace diffq
