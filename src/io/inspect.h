// What `diffq inspect` reports about a checkpoint: a Diffusers pipeline folder, a lone model folder, a
// safetensors file, a sharded *.safetensors.index.json, a PyTorch .bin checkpoint (or its sharded
// *.bin.index.json), or a GGUF file. Built as JSON first (the --json output), then rendered as text
// from that JSON, so both always agree.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace diffq::io {

// Detects the kind of `path` and summarises it. Throws diffq::Error for unreadable/malformed input.
nlohmann::ordered_json inspect_json(const std::filesystem::path& path);
std::string inspect_text(const nlohmann::ordered_json& summary);
inline std::string inspect_text(const std::filesystem::path& path) {
  return inspect_text(inspect_json(path));
}

// "1.2K", "11.9B", "17"
std::string format_count(uint64_t n);

}  // namespace diffq::io
