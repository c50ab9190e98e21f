// JSON responses and errors, typed request fields, and request -> job (server_state.h).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>

#include "diffq/error.h"
#include "server_state.h"

namespace diffq::serve {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  // Replace (U+FFFD), never throw: a string that echoes a client's invalid bytes must not turn a
  // response into a 500 with nlohmann's type_error text.
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& field,
                std::optional<double> limit) {
  json e = {{"message", message}, {"type", status == 401 ? "authentication_error" : "invalid_request_error"}};
  e["field"] = field.empty() ? json(nullptr) : json(field);
  if (limit) {
    if (std::floor(*limit) == *limit && std::fabs(*limit) < 9e15) e["limit"] = int64_t(*limit);
    else e["limit"] = *limit;
  }
  send_json(res, status, {{"error", e}});
}

void send_error(httplib::Response& res, const app::RequestError& e) { send_error(res, e.status, e.message, e.field, e.limit); }

void guarded(httplib::Response& res, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const app::RequestError& e) {
    send_error(res, e);
  } catch (const Error& e) {  // the pipeline refused the parameters (e.g. a size its VAE cannot take)
    send_error(res, 422, e.what());
  } catch (const std::exception& e) {
    send_error(res, 500, e.what());
  }
}

size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) n = 1, cp = c;
    else if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = cp << 6 | (d & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (n > 1 && (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) return i;
    i += n;
  }
  return std::string::npos;
}

json parse_body(const httplib::Request& req, int64_t max_body) {
  if (int64_t(req.body.size()) > max_body)
    throw app::RequestError(413, "body", cat("the body is ", req.body.size(), " bytes; the limit is ", max_body),
                            double(max_body));
  if (const size_t bad = first_invalid_utf8(req.body); bad != std::string::npos)
    throw app::RequestError(400, "body", cat("the body is not valid UTF-8 (byte ", bad, " of ", req.body.size(),
                                             "): JSON text must be UTF-8"));
  json j;
  try {
    j = json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw app::RequestError(400, "body", cat("malformed JSON at byte ", e.byte, " of ", req.body.size()));
  } catch (const json::out_of_range&) {  // a number beyond a double's range (1e400): found by fuzz_request_params
    throw app::RequestError(400, "body", "the body holds a number too large for a double");
  }
  if (!j.is_object()) throw app::RequestError(400, "body", "the body must be a JSON object");
  return j;
}

namespace {
[[noreturn]] void wrong_type(const char* field, const char* want, const json& v) {
  throw app::RequestError(400, field, cat(field, " must be ", want, ", got ", v.type_name(), " ",
                                          v.dump(-1, ' ', false, json::error_handler_t::replace)));
}
const json* field_of(const json& j, const char* f) {
  auto it = j.find(f);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
}  // namespace

std::optional<std::string> get_string(const json& j, const char* field) {
  const json* v = field_of(j, field);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(field, "a string", *v);
  return v->get<std::string>();
}

std::optional<int64_t> get_int(const json& j, const char* field) {
  const json* v = field_of(j, field);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return int64_t(d);
  }
  wrong_type(field, "an integer", *v);
}

std::optional<double> get_number(const json& j, const char* field) {
  const json* v = field_of(j, field);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(field, "a number", *v);
  return v->get<double>();
}

std::optional<bool> get_bool(const json& j, const char* field) {
  const json* v = field_of(j, field);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(field, "true or false", *v);
  return v->get<bool>();
}

uint64_t get_seed(const json& j, const char* field, bool random_if_absent) {
  const json* v = field_of(j, field);
  if (!v || (v->is_number_integer() && v->get<int64_t>() == -1)) {
    if (!v && !random_if_absent) return 0;
    static std::mt19937_64 rng{std::random_device{}()};
    static std::mutex mu;
    std::lock_guard lk(mu);
    return rng() >> 1;  // < 2^63: JSON clients read it back exactly as an integer
  }
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer()) {
    const int64_t s = v->get<int64_t>();
    if (s < 0) throw app::RequestError(422, field, cat(field, " must be >= 0 (or -1 for a random seed), got ", s), 0.0);
    return uint64_t(s);
  }
  wrong_type(field, "an integer", *v);
}

std::shared_ptr<Job> make_job(Server::State& s, const std::string& model, const app::GenerateRequest& r,
                              const json& params_json, const std::string& output_format,
                              const std::map<std::string, std::string>& fields) {
  auto job = std::make_shared<Job>();
  job->model = s.models->resolve(model);
  job->kind = s.models->kind_of(job->model);
  try {
    job->params = app::to_generate_params(r, job->kind == "video", s.opt.limits);
  } catch (const app::RequestError& e) {
    auto it = fields.find(e.field);
    if (it == fields.end()) throw;
    throw app::RequestError(e.status, it->second, e.message, e.limit);
  }
  job->request = r;
  job->params_json = params_json;
  job->params_json["model"] = job->model;
  job->params_json["seed"] = r.seed;
  job->output_format = output_format;
  job->preview_every = s.opt.preview_every;
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {  // 64 random bits: ids of API processes sharing one Redis queue never meet
    std::random_device rd;
    return uint64_t(rd()) << 32 ^ uint64_t(rd());
  }();
  std::ostringstream id;
  id << "job_" << std::hex << ((salt ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ULL)) & 0xffffffffffffULL);
  job->id = id.str();
  return job;
}

std::vector<Job::Lora> get_loras(const Server::State& s, const json& body) {
  std::vector<Job::Lora> out;
  const auto it = body.find("loras");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) wrong_type("loras", "an array of {\"name\", \"scale\"}", *it);
  if (!it->empty() && s.opt.lora_dir.empty())
    throw app::RequestError(422, "loras", "this server takes no LoRAs (start it with --lora-dir DIR)");
  for (const auto& l : *it) {
    if (!l.is_object()) wrong_type("loras", "an array of {\"name\", \"scale\"}", l);
    const auto name = get_string(l, "name");
    if (!name || name->empty()) throw app::RequestError(400, "loras", "each LoRA needs a \"name\"");
    const bool plain = std::all_of(name->begin(), name->end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!plain || name->front() == '.')
      throw app::RequestError(422, "loras", "LoRA name \"" + *name + "\" must be a file stem in --lora-dir (letters, digits, _ - .)");
    const auto file = s.opt.lora_dir / (*name + ".safetensors");
    if (!std::filesystem::is_regular_file(file))
      throw app::RequestError(422, "loras", "no LoRA named \"" + *name + "\" (no " + *name + ".safetensors in --lora-dir)");
    for (const auto& o : out)
      if (o.name == *name) throw app::RequestError(422, "loras", "LoRA \"" + *name + "\" is given twice");
    out.push_back({*name, file, get_number(l, "scale").value_or(1.0)});
  }
  return out;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  check(bool(f), "serve", "cannot read ", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace diffq::serve
