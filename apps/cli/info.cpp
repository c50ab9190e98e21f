// diffq info [--json]: what this build is and which kernels it runs on this machine (diffq/system_info.h).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "diffq/system_info.h"

namespace diffq::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show the build, the CPU's features, the kernels chosen and the GPUs seen");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([json] {
    const SystemInfo info = system_info();
    const std::string text = *json ? to_json(info) + "\n" : to_text(info);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace diffq::cli
