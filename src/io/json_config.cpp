#include "io/json_config.h"

#include <fstream>
#include <sstream>

#include "diffq/error.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "config";

[[noreturn]] void wrong_type(const std::string& src, std::string_view key, const nlohmann::json& v,
                             const char* expected) {
  fail(kCtx, src, ": key '", key, "' is ", v.dump().substr(0, 80), " (", v.type_name(),
       "), expected ", expected);
}

template <class T>
T scalar(const std::string& src, std::string_view key, const nlohmann::json& v);

template <>
bool scalar<bool>(const std::string& src, std::string_view key, const nlohmann::json& v) {
  if (!v.is_boolean()) wrong_type(src, key, v, "a boolean");
  return v.get<bool>();
}
template <>
int64_t scalar<int64_t>(const std::string& src, std::string_view key, const nlohmann::json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX)) return int64_t(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  wrong_type(src, key, v, "an integer");
}
template <>
int scalar<int>(const std::string& src, std::string_view key, const nlohmann::json& v) {
  const int64_t x = scalar<int64_t>(src, key, v);
  if (x < INT32_MIN || x > INT32_MAX) wrong_type(src, key, v, "a 32-bit integer");
  return int(x);
}
template <>
double scalar<double>(const std::string& src, std::string_view key, const nlohmann::json& v) {
  if (!v.is_number()) wrong_type(src, key, v, "a number");
  return v.get<double>();
}
template <>
float scalar<float>(const std::string& src, std::string_view key, const nlohmann::json& v) {
  return float(scalar<double>(src, key, v));
}
template <>
std::string scalar<std::string>(const std::string& src, std::string_view key,
                                const nlohmann::json& v) {
  if (!v.is_string()) wrong_type(src, key, v, "a string");
  return v.get<std::string>();
}

template <class E>
std::vector<E> list(const std::string& src, std::string_view key, const nlohmann::json& v) {
  if (!v.is_array()) wrong_type(src, key, v, "a list");
  std::vector<E> out;
  for (const auto& e : v) out.push_back(scalar<E>(src, key, e));
  return out;
}
}  // namespace

bool JsonConfig::has(std::string_view key) const {
  if (!j_.is_object()) return false;
  const auto it = j_.find(std::string(key));
  return it != j_.end() && !it->is_null();
}

template <class T>
T JsonConfig::convert(std::string_view key) const {
  const nlohmann::json& v = j_.at(std::string(key));
  if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>> ||
                std::is_same_v<T, std::vector<std::string>>)
    return list<typename T::value_type>(source_, key, v);
  else
    return scalar<T>(source_, key, v);
}

template <class T>
T JsonConfig::require(std::string_view key) const {
  check(has(key), kCtx, source_, ": required key '", key, "' is missing");
  return convert<T>(key);
}

#define DIFFQ_CONFIG_TYPE(T)                                        \
  template T JsonConfig::convert<T>(std::string_view key) const;  \
  template T JsonConfig::require<T>(std::string_view key) const;
DIFFQ_CONFIG_TYPE(bool)
DIFFQ_CONFIG_TYPE(int)
DIFFQ_CONFIG_TYPE(int64_t)
DIFFQ_CONFIG_TYPE(double)
DIFFQ_CONFIG_TYPE(float)
DIFFQ_CONFIG_TYPE(std::string)
DIFFQ_CONFIG_TYPE(std::vector<int64_t>)
DIFFQ_CONFIG_TYPE(std::vector<double>)
DIFFQ_CONFIG_TYPE(std::vector<std::string>)
#undef DIFFQ_CONFIG_TYPE

nlohmann::json read_json_file(const std::filesystem::path& path, const char* ctx) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), ctx, "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(ctx, path.string(), " is not valid JSON: ", e.what());
  }
}

JsonConfig read_json_config(const std::filesystem::path& path, const char* ctx) {
  nlohmann::json j = read_json_file(path, ctx);
  check(j.is_object(), ctx, path.string(), " must hold a JSON object");
  return JsonConfig(std::move(j), path.string());
}

}  // namespace diffq::io
