// Parsing and printing of --cache specs (include/diffq/cache.h).
#include <cstdlib>
#include <sstream>

#include "diffq/cache.h"
#include "diffq/error.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "cache";

double to_double(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  check(!s.empty() && end && *end == '\0', kCtx, what, " must be a number, got \"", s, "\"");
  return v;
}
int64_t to_int(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  check(!s.empty() && end && *end == '\0', kCtx, what, " must be an integer, got \"", s, "\"");
  return int64_t(v);
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}
}  // namespace

double CacheOptions::effective_threshold() const {
  if (threshold >= 0) return threshold;
  switch (method) {
    case Method::first_block: return 0.05;  // FirstBlockCacheConfig.threshold
    case Method::magcache: return 0.06;     // MagCacheConfig.threshold
    case Method::teacache: return 0.4;      // TeaCache4FLUX's suggested rel_l1_thresh (1.8x)
    default: return 0.0;
  }
}

std::string CacheOptions::str() const {
  std::ostringstream s;
  switch (method) {
    case Method::none: return "none";
    case Method::first_block: s << "fbc:" << effective_threshold(); break;
    case Method::teacache: s << "teacache:" << effective_threshold(); break;
    case Method::taylorseer:
      s << "taylorseer:interval=" << cache_interval << ",order=" << max_order << ",before=" << disable_cache_before_step;
      if (disable_cache_after_step) s << ",after=" << *disable_cache_after_step;
      s << ",dtype=" << (taylor_factors_bf16 ? "bf16" : "f32");
      break;
    case Method::magcache:
      s << "magcache:" << effective_threshold() << ",max_skip=" << max_skip_steps << ",retention=" << retention_ratio;
      if (num_inference_steps > 0) s << ",steps=" << num_inference_steps;
      if (calibrate) s << ",calibrate";
      break;
  }
  return s.str();
}

CacheOptions parse_cache_spec(const std::string& spec) {
  CacheOptions o;
  if (spec.empty() || spec == "none") return o;
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (name == "fbc" || name == "first_block" || name == "firstblock") o.method = CacheOptions::Method::first_block;
  else if (name == "taylorseer") o.method = CacheOptions::Method::taylorseer;
  else if (name == "magcache" || name == "mag") o.method = CacheOptions::Method::magcache;
  else if (name == "teacache") o.method = CacheOptions::Method::teacache;
  else fail(kCtx, "unknown cache method \"", name, "\" in --cache ", spec, " (fbc, taylorseer, magcache, teacache)");

  for (const std::string& item : rest.empty() ? std::vector<std::string>{} : split(rest, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      if (item == "calibrate" && o.method == CacheOptions::Method::magcache) {
        o.calibrate = true;
        continue;
      }
      check(o.method != CacheOptions::Method::taylorseer, kCtx, "taylorseer takes key=value settings, got \"", item,
            "\" in ", spec);
      o.threshold = to_double(item, "the threshold of " + spec);
      continue;
    }
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    using M = CacheOptions::Method;
    if (k == "threshold" && o.method != M::taylorseer) o.threshold = to_double(v, k);
    else if (o.method == M::taylorseer && (k == "interval" || k == "cache_interval")) o.cache_interval = to_int(v, k);
    else if (o.method == M::taylorseer && (k == "order" || k == "max_order")) o.max_order = to_int(v, k);
    else if (o.method == M::taylorseer && (k == "before" || k == "disable_cache_before_step"))
      o.disable_cache_before_step = to_int(v, k);
    else if (o.method == M::taylorseer && (k == "after" || k == "disable_cache_after_step"))
      o.disable_cache_after_step = to_int(v, k);
    else if (o.method == M::taylorseer && (k == "dtype" || k == "taylor_factors_dtype")) {
      check(v == "bf16" || v == "bfloat16" || v == "f32" || v == "float32", kCtx, "taylorseer dtype must be bf16 or f32, got ", v);
      o.taylor_factors_bf16 = v == "bf16" || v == "bfloat16";
    } else if (o.method == M::magcache && (k == "max_skip" || k == "max_skip_steps")) o.max_skip_steps = to_int(v, k);
    else if (o.method == M::magcache && (k == "retention" || k == "retention_ratio")) o.retention_ratio = to_double(v, k);
    else if (o.method == M::magcache && (k == "steps" || k == "num_inference_steps")) o.num_inference_steps = to_int(v, k);
    else if (o.method == M::magcache && k == "calibrate") o.calibrate = v == "1" || v == "true";
    else fail(kCtx, "unknown setting \"", k, "\" for ", name, " in --cache ", spec);
  }
  check(o.cache_interval >= 1, kCtx, "taylorseer interval must be >= 1, got ", o.cache_interval);
  check(o.max_order >= 0, kCtx, "taylorseer order must be >= 0, got ", o.max_order);
  check(o.max_skip_steps >= 0 && o.retention_ratio >= 0, kCtx, "magcache max_skip / retention must be >= 0");
  check(o.num_inference_steps >= 0, kCtx, "magcache steps must be >= 0");
  return o;
}

}  // namespace diffq
