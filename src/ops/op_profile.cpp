#include "ops/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace diffq::ops {

namespace {

struct Entry {
  int64_t calls = 0;
  double seconds = 0;
};

class Profile {
 public:
  ~Profile() {
    if (entries_.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows;
    double total = 0;
    for (const auto& [key, e] : entries_) {
      rows.emplace_back(std::string(op_name(key.first)) + " " + std::string(dtype_name(key.second)), e);
      total += e.seconds;
    }
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "\nop profile (DIFFQ_PROFILE_OPS): %.1f ms in ops\n", total * 1e3);
    std::fprintf(stderr, "%-28s %10s %12s %7s\n", "op dtype", "calls", "total ms", "share");
    for (const auto& [name, e] : rows)
      std::fprintf(stderr, "%-28s %10lld %12.1f %6.1f%%\n", name.c_str(), static_cast<long long>(e.calls),
                   e.seconds * 1e3, total > 0 ? 100.0 * e.seconds / total : 0.0);
  }
  void add(OpKind k, DType d, double s) {
    std::lock_guard<std::mutex> l(m_);
    Entry& e = entries_[{k, d}];
    ++e.calls;
    e.seconds += s;
  }

 private:
  std::mutex m_;
  std::map<std::pair<OpKind, DType>, Entry> entries_;
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

bool op_profile_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DIFFQ_PROFILE_OPS");
    return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
  }();
  return on;
}

void op_profile_record(OpKind kind, DType dtype, double seconds) { profile().add(kind, dtype, seconds); }

}  // namespace diffq::ops
