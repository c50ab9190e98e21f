#include "bench_cache.h"

#include <map>

#include "diffq/error.h"

namespace diffq::cli {

std::optional<CacheOptions> cache_token(const std::string& combo, const std::string& tok) {
  const std::string name = tok.substr(0, tok.find(':'));
  if (name != "fbc" && name != "taylorseer" && name != "magcache" && name != "teacache") return std::nullopt;
  try {
    return parse_cache_spec(tok);
  } catch (const Error& e) {
    fail("bench", "combination '", combo, "': cache '", tok, "': ", e.what());
  }
}

nlohmann::json cache_json(const CacheReport& r) {
  // Decisions per (model, context) in call order.
  std::map<std::pair<std::string, std::string>, std::string> calls;
  for (const auto& s : r.steps) calls[{s.model, s.context}] += s.computed ? 'C' : 'S';
  nlohmann::json c = nlohmann::json::array();
  for (const auto& [k, d] : calls) c.push_back({{"model", k.first}, {"context", k.second}, {"decisions", d}});
  const int64_t total = r.computed + r.skipped;
  nlohmann::json ranges = nlohmann::json::array();
  if (!r.always_run.empty()) ranges.push_back({{"blocks", r.always_run}, {"computed", total}, {"skipped", 0}});
  ranges.push_back({{"blocks", r.skipped_range}, {"computed", r.computed}, {"skipped", r.skipped}});
  nlohmann::json j = {{"method", r.method},         {"computed", r.computed}, {"skipped", r.skipped},
                      {"skipped_range", r.skipped_range}, {"always_run", r.always_run}, {"per_range", ranges},
                      {"calls", c}};
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

std::string cache_cell(const nlohmann::json& row) {
  if (!row.contains("cache")) return "-";
  const auto& c = row.at("cache");
  return std::to_string(c.at("computed").get<int64_t>()) + " / " + std::to_string(c.at("skipped").get<int64_t>());
}

std::vector<std::string> cache_notes(const std::vector<nlohmann::json>& rows) {
  std::vector<std::string> out;
  for (const auto& row : rows) {
    if (!row.contains("cache")) continue;
    const auto& c = row.at("cache");
    std::string line = "- " + c.at("method").get<std::string>() + ": a skipped call skips " +
                       c.at("skipped_range").get<std::string>();
    if (!c.at("always_run").get<std::string>().empty())
      line += "; " + c.at("always_run").get<std::string>() + " always runs";
    if (c.contains("note")) line += " (" + c.at("note").get<std::string>() + ")";
    bool seen = false;
    for (const auto& l : out) seen = seen || l == line;
    if (!seen) out.push_back(line);
  }
  return out;
}

}  // namespace diffq::cli
