// The one error type of diffq. Every message starts with a bracketed context naming where it came
// from, e.g. "[safetensors] header of model.safetensors claims 4 GiB but the file has 12 MiB".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace diffq {

class Error : public std::runtime_error {
 public:
  Error(std::string_view context, const std::string& message)
      : std::runtime_error(format(context, message)), context_(context) {}
  const std::string& context() const { return context_; }

 private:
  static std::string format(std::string_view context, const std::string& message) {
    std::string s;
    s.reserve(context.size() + message.size() + 3);
    s.append(1, '[').append(context).append("] ").append(message);
    return s;
  }
  std::string context_;
};

// Concatenates any streamable values into one string: cat("expected ", 3, " dims").
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(std::string_view context, const Args&... args) {
  throw Error(context, cat(args...));
}

// check(cond, "ctx", "message parts"...): throws Error when cond is false.
template <class... Args>
inline void check(bool cond, std::string_view context, const Args&... args) {
  if (!cond) fail(context, args...);
}

}  // namespace diffq
