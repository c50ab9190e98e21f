#include "io/libav_util.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace diffq::io::libav {

namespace {

thread_local std::string t_log;

void on_log(void* avcl, int level, const char* fmt, va_list vl) {
  static const bool verbose = [] {
    const char* e = std::getenv("DIFFQ_AV_LOG");
    return e && *e && *e != '0';
  }();
  if (verbose && level <= AV_LOG_INFO) {
    va_list copy;
    va_copy(copy, vl);
    av_log_default_callback(avcl, level, fmt, copy);
    va_end(copy);
  }
  if (level > AV_LOG_ERROR) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &print_prefix);
  std::string s(line);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.empty()) return;
  if (t_log.size() > 2000) return;  // the first messages say why; keep the error readable
  if (!t_log.empty()) t_log += "; ";
  t_log += s;
}

}  // namespace

std::string err_str(int errnum) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  if (av_strerror(errnum, buf, sizeof buf) < 0) std::snprintf(buf, sizeof buf, "libav error %d", errnum);
  return buf;
}

void install_log_capture() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(on_log); });
}

void clear_log() { t_log.clear(); }

std::string last_log() { return t_log.empty() ? std::string() : " (libav: " + t_log + ")"; }

}  // namespace diffq::io::libav
