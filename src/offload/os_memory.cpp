#include "offload/os_memory.h"

#include "diffq/memory.h"

#include <fstream>
#include <string>


namespace diffq::offload {

namespace {
int64_t status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::stoll(line.substr(k.size())) * 1024;
  return 0;
}
}  // namespace

int64_t current_rss_bytes() { return status_kib("VmRSS"); }
int64_t peak_rss_bytes() { return status_kib("VmHWM"); }

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  return bool(f);
}

}  // namespace diffq::offload

namespace diffq {
// The public API's names (diffq/memory.h) for the OS view of the process.
int64_t process_peak_rss_bytes() { return offload::peak_rss_bytes(); }
bool reset_peak_rss() { return offload::reset_peak_rss(); }
}  // namespace diffq
