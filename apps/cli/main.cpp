// diffq: command-line front end over the public API.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "diffq/error.h"
#include "diffq/runtime.h"

int main(int argc, char** argv) {
  CLI::App app{"diffq: diffusion pipelines (FLUX.1, Wan2.1) in C++ with quantization, compile and offload"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("diffq ") + DIFFQ_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (default: DIFFQ_NUM_THREADS, else all hardware threads)")
      ->check(CLI::Range(1, 1024));
  app.parse_complete_callback([&] {
    if (threads > 0) diffq::set_num_threads(threads);
  });
  diffq::cli::add_inspect_command(app);
  diffq::cli::add_generate_command(app);
  diffq::cli::add_bench_command(app);
  diffq::cli::add_quantize_command(app);
  diffq::cli::add_info_command(app);
  diffq::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const diffq::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
