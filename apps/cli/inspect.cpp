// diffq inspect <file|folder>  (placeholder until src/io lands: prints what was asked)
#include <cstdio>
#include <string>

#include "commands.h"
#include "diffq/error.h"

namespace diffq::cli {

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "List the components/tensors of a Diffusers folder, safetensors or GGUF file");
  auto path = std::make_shared<std::string>();
  cmd->add_option("path", *path, "file or folder")->required();
  cmd->callback([path] { fail("inspect", "not implemented yet for '", *path, "'"); });
}

}  // namespace diffq::cli
