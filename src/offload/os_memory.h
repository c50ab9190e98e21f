// Process memory as the OS sees it: the process' resident set (current / peak, resettable on Linux)
// that --stats and the benchmarks report. (Returning freed heap to the OS: diffq/memory.h.)
#pragma once

#include <cstdint>

namespace diffq::offload {

int64_t current_rss_bytes();       // VmRSS; 0 when unknown
int64_t peak_rss_bytes();          // VmHWM (since start or the last reset); 0 when unknown
bool reset_peak_rss();             // writes 5 to /proc/self/clear_refs (Linux >= 4.0); false if refused

}  // namespace diffq::offload
