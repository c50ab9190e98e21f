#include "backend/cpu/compile/tuning_json.h"

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/simd_targets.h"
#include "diffq/error.h"
#include "diffq/runtime.h"

namespace diffq::backend::cpu {

using nlohmann::json;

std::string_view gemm_split_name(GemmSplit s) {
  switch (s) {
    case GemmSplit::longer_side: return "longer_side";
    case GemmSplit::rows: return "rows";
    case GemmSplit::cols: return "cols";
    case GemmSplit::none: return "none";
  }
  return "?";
}

json tuning_to_json(const Tuning& t) {
  return json{{"gemm_split", std::string(gemm_split_name(t.gemm_split))},
              {"gemm_parts_per_thread", t.gemm_parts_per_thread},
              {"attn_bq", t.attn_bq},
              {"attn_bk", t.attn_bk}};
}

Tuning tuning_from_json(const json& j, const std::string& where) {
  check(j.is_object(), "autotune", where, ": a tuning must be an object");
  Tuning t;
  auto positive = [&](const std::string& field, const json& v) -> int64_t {
    check(v.is_number_integer() && v.get<int64_t>() > 0, "autotune", where, ": \"", field,
          "\" must be a positive integer, got ", v.dump());
    return v.get<int64_t>();
  };
  for (const auto& [field, v] : j.items()) {
    if (field == "gemm_split") {
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "longer_side") t.gemm_split = GemmSplit::longer_side;
      else if (s == "rows") t.gemm_split = GemmSplit::rows;
      else if (s == "cols") t.gemm_split = GemmSplit::cols;
      else if (s == "none") t.gemm_split = GemmSplit::none;
      else fail("autotune", where, ": unknown gemm_split '", s, "' (expected longer_side, rows, cols or none)");
    } else if (field == "gemm_parts_per_thread") {
      const int64_t p = positive(field, v);
      check(p <= 64, "autotune", where, ": \"gemm_parts_per_thread\" must be at most 64, got ", p);
      t.gemm_parts_per_thread = int(p);
    } else if (field == "attn_bq") {
      t.attn_bq = positive(field, v);
    } else if (field == "attn_bk") {
      t.attn_bk = positive(field, v);
    } else {
      fail("autotune", where, ": unknown field '", field,
           "' (expected gemm_split, gemm_parts_per_thread, attn_bq, attn_bk)");
    }
  }
  return t;
}

std::string processor_key() {
  return cpu_model_name() + " | " + simd_target_chosen() + " | " + std::to_string(num_threads()) + " threads";
}

}  // namespace diffq::backend::cpu
