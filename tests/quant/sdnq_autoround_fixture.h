// tests/fixtures/quant-sdnq-autoround (tools/reference/make_quant_sdnq_autoround.py): cases.json, the tiny
// FLUX pipeline run by Diffusers with SDNQ / AutoRound, and FNV-1a 64 of the libraries' tensors.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/tensor.h"
#include "pipelines/flux_pipeline.h"
#include "common/flux_latent_call.h"

namespace diffq::testing {

inline std::filesystem::path sdnq_ar_root() {
  return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/quant-sdnq-autoround";
}
inline std::filesystem::path tiny_flux_root() { return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux"; }

inline nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

inline const nlohmann::json& sdnq_ar_cases() {
  static const nlohmann::json j = read_json_file(sdnq_ar_root() / "cases.json");
  return j;
}

inline std::string fnv1a64(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < c.nbytes(); ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

inline std::string fnv1a64_str(const std::string& text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// "<fnv1a64> <dtype> <d0>x<d1>..." as the fixture script writes each tensor.
inline std::string tensor_desc(const Tensor& t) {
  std::string shape;
  for (int64_t d : t.shape()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  return fnv1a64(t) + " " + std::string(dtype_name(t.dtype())) + " " + shape;
}

// The [N, K] of a tensor description.
inline Shape desc_shape(const std::string& desc) {
  Shape s;
  std::string dims = desc.substr(desc.rfind(' ') + 1);
  for (size_t p = 0; p <= dims.size();) {
    const size_t q = std::min(dims.find('x', p), dims.size());
    s.push_back(std::stoll(dims.substr(p, q - p)));
    p = q + 1;
  }
  return s;
}

// The fixture's FluxPipeline call, output_type "latent".
inline FluxCallOptions sdnq_ar_call() {
  const auto call = sdnq_ar_cases().at("call");
  return diffq::testing::flux_latent_call(call);
}

}  // namespace diffq::testing
