// Shared by test_bfl_single_file.cpp and test_modelopt_folder.cpp: the fixture folder
// (tests/fixtures/quant-bfl-modelopt, tools/reference/make_quant_bfl_modelopt.py), the tiny pipeline call it
// was made with, and a few helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/error.h"
#include "modules/module.h"
#include "pipelines/flux_pipeline.h"
#include "common/flux_latent_call.h"

namespace diffq::testing::bflmo {

inline const std::filesystem::path kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/quant-bfl-modelopt";
inline const std::filesystem::path kTinyFlux = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";

inline const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFix / "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

// The fixture's call (prompt, size, steps, guidance, seed) as FluxCallOptions, latents out.
inline FluxCallOptions call_options() { return diffq::testing::flux_latent_call(cases().at("call")); }

inline const Parameter& param(const Module& m, const std::string& name) {
  for (const auto& [k, p] : m.named_parameters())
    if (k == name) return *p;
  throw std::runtime_error("no parameter " + name);
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Number of float32 values whose bits differ.
inline int64_t bit_mismatches(const Tensor& a, const Tensor& b) {
  const auto x = a.to_f32_vector(), y = b.to_f32_vector();
  if (x.size() != y.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], 4) != 0;
  return n;
}

}  // namespace diffq::testing::bflmo
