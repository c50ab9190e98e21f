// The generate commands' progress bar on stderr (a terminal only): "[####   ] step 3/50  1.20 s/it  ETA 56.4 s".
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace diffq::cli {

// A per-step callback that draws the bar when `tty`; always returns true (never interrupts).
inline std::function<bool(int64_t, int64_t, float)> progress_bar(bool tty) {
  const auto t0 = std::chrono::steady_clock::now();
  return [tty, t0](int64_t step, int64_t total, float) {
    if (!tty) return true;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per = el / double(step + 1);
    std::fprintf(stderr, "\r[%-30s] step %lld/%lld  %.2f s/it  ETA %.1f s ",
                 std::string(size_t(30 * (step + 1) / total), '#').c_str(), (long long)(step + 1), (long long)total,
                 per, per * double(total - step - 1));
    std::fflush(stderr);
    return true;
  };
}

}  // namespace diffq::cli
