#include "compile_report.h"

#include <cstdio>

namespace diffq::cli {

nlohmann::json compile_report(const DiffusionPipeline::CompileReport& r) {
  if (!r.compiled) return nullptr;
  nlohmann::json j = {{"graphs", r.graphs}, {"cache_hits", r.cache_hits}, {"eager_fallbacks", r.eager_fallbacks},
                      {"compile_s", r.compile_s}, {"opaque_nodes", r.opaque_nodes},
                      {"quantized_gemm_nodes", r.quantized_gemm_nodes}, {"autotune", nullptr},
                      {"declined", nullptr}, {"device_graphs", nullptr}};
  if (r.device_graphs + r.device_graph_warmups + r.device_graph_refused > 0)
    j["device_graphs"] = {{"captured", r.device_graphs}, {"replays", r.device_graph_replays},
                          {"warmups", r.device_graph_warmups}, {"refused", r.device_graph_refused},
                          {"refusal", r.device_graph_refusal}};
  if (!r.declined_passes.empty()) j["declined"] = {{"passes", r.declined_passes}, {"why", r.declined_why}};
  if (r.autotune)
    j["autotune"] = {{"nodes", r.autotune_nodes},           {"tuned", r.autotune_tuned},
                     {"candidates", r.autotune_candidates}, {"cache_hits", r.autotune_cache_hits},
                     {"non_default", r.autotune_non_default}, {"seconds", r.autotune_s},
                     {"cache_file", r.autotune_cache_file}};
  return j;
}

std::string compile_report_line(const nlohmann::json& r) {
  if (r.is_null()) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf, "compile: %lld graph(s) compiled in %.3f s", (long long)r.at("graphs").get<int64_t>(),
                r.at("compile_s").get<double>());
  std::string s = buf;
  if (const int64_t q = r.at("quantized_gemm_nodes").get<int64_t>(); q > 0) s += "; " + std::to_string(q) + " quantized GEMM node(s)";
  if (const int64_t o = r.at("opaque_nodes").get<int64_t>(); o > 0) s += "; " + std::to_string(o) + " opaque call(s)";
  if (const auto& d = r.at("declined"); !d.is_null()) {
    std::string passes;
    for (const auto& p : d.at("passes")) passes += (passes.empty() ? "" : ",") + p.get<std::string>();
    s += "; declined " + passes + " (" + d.at("why").get<std::string>() + ")";
  }
  if (const auto it = r.find("device_graphs"); it != r.end() && !it->is_null()) {
    std::snprintf(buf, sizeof buf, "; device graphs: %lld captured, %lld replays, %lld warm-up call(s), %lld refused",
                  (long long)it->at("captured").get<int64_t>(), (long long)it->at("replays").get<int64_t>(),
                  (long long)it->at("warmups").get<int64_t>(), (long long)it->at("refused").get<int64_t>());
    s += buf;
    if (const std::string why = it->at("refusal").get<std::string>(); !why.empty()) s += " (" + why + ")";
  }
  if (const auto& a = r.at("autotune"); !a.is_null()) {
    std::snprintf(buf, sizeof buf,
                  "; autotune: %lld nodes, %lld timed (%lld candidates), %lld from the cache, %lld not default, "
                  "%.3f s; cache %s",
                  (long long)a.at("nodes").get<int64_t>(), (long long)a.at("tuned").get<int64_t>(),
                  (long long)a.at("candidates").get<int64_t>(), (long long)a.at("cache_hits").get<int64_t>(),
                  (long long)a.at("non_default").get<int64_t>(), a.at("seconds").get<double>(),
                  a.at("cache_file").get<std::string>().c_str());
    s += buf;
  }
  return s;
}

}  // namespace diffq::cli
