#include "lora_options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "diffq/error.h"

namespace diffq::cli {

LoraArg parse_lora_arg(const std::string& text) {
  LoraArg a{text, 1.0};
  if (const auto colon = text.rfind(':'); colon != std::string::npos && colon + 1 < text.size()) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double s = std::strtod(tail.c_str(), &end);
    if (end == tail.c_str() + tail.size() && std::isfinite(s)) a = {text.substr(0, colon), s};
  }
  check(!a.file.empty(), "lora", "--lora '", text, "': no file (FILE[:scale])");
  check(std::filesystem::is_regular_file(a.file), "lora", "--lora ", a.file, ": no such file");
  return a;
}

nlohmann::json apply_loras(DiffusionPipeline& pipe, const std::vector<std::string>& args,
                           const std::vector<std::string>& args_2, bool lenient, bool fuse, bool quiet) {
  std::vector<std::string> names;
  std::vector<double> scales;
  std::set<std::string> taken;
  auto load = [&](const std::string& text, bool second) {
    const LoraArg a = parse_lora_arg(text);
    std::string base = std::filesystem::path(a.file).stem().string() + (second ? "_2" : "");
    std::string name = base;
    for (int i = 2; taken.count(name); ++i) name = base + "_" + std::to_string(i);
    taken.insert(name);
    names.push_back(pipe.load_lora(a.file, name, a.scale, lenient, /*hotswap=*/false, second));
    scales.push_back(a.scale);
  };
  for (const auto& t : args) load(t, false);
  for (const auto& t : args_2) load(t, true);
  if (names.empty()) return nullptr;
  pipe.set_adapters(names, scales);
  std::vector<std::string> unfused;
  if (fuse) {
    unfused = pipe.fuse_lora(1.0);
    if (!quiet && !unfused.empty())
      std::fprintf(stderr, "fuse-lora: %zu quantized layers keep their LoRA unfused (e.g. %s)\n", unfused.size(),
                   unfused.front().c_str());
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& l : pipe.loras())
    list.push_back({{"name", l.name}, {"file", l.file}, {"component", l.component}, {"weight", l.weight},
                    {"active", l.active}, {"warnings", l.warnings}});
  return {{"adapters", list}, {"fused", pipe.lora_fused()}, {"unfused_quantized_layers", unfused.size()}};
}

}  // namespace diffq::cli
