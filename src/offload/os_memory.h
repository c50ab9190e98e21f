// Process memory as the OS sees it: returning freed heap to the OS after weights moved home (glibc
// keeps freed chunks below its mmap threshold otherwise, and RSS would not drop), and the process'
// resident set (current / peak, resettable on Linux) that --stats and the benchmarks report.
#pragma once

#include <cstdint>

namespace diffq::offload {

void return_freed_memory_to_os();  // malloc_trim(0) on glibc; no-op elsewhere
int64_t current_rss_bytes();       // VmRSS; 0 when unknown
int64_t peak_rss_bytes();          // VmHWM (since start or the last reset); 0 when unknown
bool reset_peak_rss();             // writes 5 to /proc/self/clear_refs (Linux >= 4.0); false if refused

}  // namespace diffq::offload
