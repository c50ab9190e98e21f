// Sub-commands of the diffq CLI; each file adds one with its options to the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace diffq::cli {

void add_inspect_command(CLI::App& app);   // inspect.cpp
void add_generate_command(CLI::App& app);  // generate.cpp
void add_bench_command(CLI::App& app);     // bench.cpp
void add_quantize_command(CLI::App& app);  // quantize.cpp
void add_info_command(CLI::App& app);      // info.cpp
void add_serve_command(CLI::App& app);     // serve.cpp (the server itself: apps/serve)

}  // namespace diffq::cli
