// diffq inspect <file|folder> [--json]: components of a Diffusers folder, or the tensors of a
// safetensors file / sharded index / GGUF file (diffq/checkpoint.h).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "diffq/checkpoint.h"

namespace diffq::cli {

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "inspect", "List the components/tensors of a Diffusers folder, safetensors, PyTorch .bin or GGUF file");
  struct Opts {
    std::string path;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("path", o->path, "Diffusers folder, model folder, .safetensors, .index.json or .gguf")
      ->required();
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o] {
    const std::string text = o->json ? inspect_json(o->path, 1) + "\n" : inspect_text(o->path);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace diffq::cli
