#include "compile_report.h"

#include <cstdio>

#include "compile/compiled_module.h"

namespace diffq::cli {

compile::CompileOptions cli_compile_options(bool autotune) {
  compile::CompileOptions o;
  if (autotune) o.mode = compile::CompileMode::max_autotune;
  return o;
}

nlohmann::json compile_report(const models::flux::FluxTransformer2DModel& t, bool autotune) {
  return compile_report(t.compiled_modules(), autotune);
}

nlohmann::json compile_report(const std::vector<const compile::CompiledModule*>& mods, bool autotune) {
  if (mods.empty()) return nullptr;
  int64_t graphs = 0, hits = 0, fallbacks = 0, opaque = 0, quantized_gemms = 0;
  double compile_s = 0;
  compile::AutotuneStats a;
  std::string file;
  for (const compile::CompiledModule* m : mods) {
    const compile::CompileStats s = m->stats();
    graphs += s.captures;  // signatures compiled (or found uncapturable: see eager_fallbacks)
    hits += s.hits;
    fallbacks += s.eager_fallbacks;
    opaque += s.last_passes.opaque_nodes;  // of the graph compiled last by each compiled module
    quantized_gemms += s.last_passes.fused_dequant;
    compile_s += s.compile_seconds;
    a.nodes += s.autotune.nodes;
    a.tuned += s.autotune.tuned;
    a.candidates += s.autotune.candidates;
    a.cache_hits += s.autotune.cache_hits;
    a.non_default += s.autotune.non_default;
    a.seconds += s.autotune.seconds;
    if (file.empty()) file = m->autotune_cache_file();
  }
  nlohmann::json j = {{"graphs", graphs}, {"cache_hits", hits}, {"eager_fallbacks", fallbacks},
                      {"compile_s", compile_s}, {"opaque_nodes", opaque},
                      {"quantized_gemm_nodes", quantized_gemms}, {"autotune", nullptr}};
  if (autotune)
    j["autotune"] = {{"nodes", a.nodes},           {"tuned", a.tuned},
                     {"candidates", a.candidates}, {"cache_hits", a.cache_hits},
                     {"non_default", a.non_default}, {"seconds", a.seconds},
                     {"cache_file", file}};
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
